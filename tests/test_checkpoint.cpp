// Checkpoint tests: bit-exact round trip of model, optimizer and trainer state; keep-last-N
// and the latest pointer; resume-path forms; every missing / corrupt / mismatched case names
// its file; simulated crashes never break `latest`; torch loads the model file; stop signals.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "io/checkpoint.h"
#include "models/registry.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "testing.h"

using namespace mpicnn;
namespace fs = std::filesystem;

namespace {

struct CkDir {
  fs::path path;
  CkDir() {
    path = fs::temp_directory_path() /
           ("mpicnn_ck_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~CkDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::string str() const { return path.string(); }
};

std::unique_ptr<Model> lenet(uint64_t seed) {
  return build_model("lenet", {.num_classes = 10, .in_channels = 1}, seed);
}

SgdOptions sgd_opts() { return {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4}; }

// Two optimizer steps on deterministic pseudo-gradients, so the momentum slab is non-zero.
void train_a_bit(Model& m, Optimizer& opt, uint64_t seed) {
  Tensor& g = m.params().grads();
  const Rng rng(seed, stream_id("ck_grads"));
  for (int s = 0; s < 2; ++s) {
    for (int64_t i = 0; i < g.numel(); ++i) g.data()[i] = rng.uniform(uint64_t(i + s * g.numel()), -1, 1);
    opt.step();
  }
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() &&
         std::memcmp(a.data(), b.data(), size_t(a.numel()) * sizeof(float)) == 0;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
void spit(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

TrainerState state_at(int64_t epoch) {
  TrainerState s;
  s.epoch = epoch;
  s.global_step = epoch * 100;
  s.samples_seen = epoch * 6400;
  s.seed = 0xfedcba9876543210ull;
  s.rng_counters = {{"shuffle", uint64_t(epoch)}, {"dropout", 12345678901234ull}};
  s.ranks = 4;
  s.config = {{"model", "lenet"}, {"lr", "0.05"}, {"batch", "64"}};
  s.run_started = "2026-01-02T03:04:05Z";
  s.input = {"resize-center-crop", 1, 28, 30, 32, {0.286f}, {0.353f}, {"shirt", "shoe, left"}};
  return s;
}

// The message of the Error that `fn` throws ("" when it throws none).
template <typename F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

std::string latest_target(const fs::path& run) { return fs::read_symlink(run / "latest").string(); }

// trainer.json as format version 1 wrote it (no CRC of its own), to edit and still load.
nlohmann::json legacy_v1(const std::string& text) {
  auto j = nlohmann::json::parse(text);
  j.erase("crc32");
  j["format_version"] = 1;
  return j;
}

}  // namespace

TEST_CASE("checkpoint round trip is bit-exact for model, optimizer and trainer state") {
  CkDir dir;
  auto a = lenet(1);
  SGD oa(a->params(), sgd_opts());
  train_a_bit(*a, oa, 7);
  const TrainerState s = state_at(3);
  const CheckpointPaths p = save_checkpoint(dir.str(), *a, oa, s, 3);
  CHECK(p.dir == (dir.path / "checkpoints" / "epoch-0003").string());
  CHECK(fs::exists(p.model));
  CHECK(fs::exists(p.optimizer));
  CHECK(fs::exists(p.trainer));

  auto b = lenet(2);
  SGD ob(b->params(), sgd_opts());
  REQUIRE_FALSE(same_bytes(a->params().values(), b->params().values()));
  const TrainerState r = load_checkpoint(dir.str(), *b, ob);
  CHECK(same_bytes(a->params().values(), b->params().values()));
  CHECK(same_bytes(a->params().buffers(), b->params().buffers()));
  CHECK(same_bytes(oa.momentum_buffer(), ob.momentum_buffer()));
  CHECK(ob.steps() == 2);
  CHECK(ob.lr() == 0.05);
  CHECK(r.epoch == 3);
  CHECK(r.step_in_epoch == 0);
  CHECK(r.global_step == 300);
  CHECK(r.samples_seen == 19200);
  CHECK(r.seed == 0xfedcba9876543210ull);
  CHECK(r.rng_counters == s.rng_counters);
  CHECK(r.ranks == 4);
  CHECK(r.config == s.config);
  CHECK(r.run_started == s.run_started);
  CHECK(r.input.geometry == "resize-center-crop");
  CHECK(r.input.channels == 1);
  CHECK(r.input.height == 28);
  CHECK(r.input.width == 30);
  CHECK(r.input.resize == 32);
  CHECK(r.input.mean == s.input.mean);
  CHECK(r.input.stddev == s.input.stddev);
  CHECK(r.input.class_names == s.input.class_names);
  CHECK(r.model == "lenet");
  CHECK(r.optimizer == "sgd");
  CHECK(r.saved_unix_ms > 0);
  CHECK(r.saved_at.size() == 20);  // 2026-01-02T03:04:05Z
  CHECK(r.loss_scale == 0);  // not an fp16 run: no loss-scaler record
  CHECK(r.data_path.empty());  // none recorded (as in checkpoints older than the field)

  // An fp16 run's loss scaler travels with the checkpoint.
  TrainerState f = state_at(5);
  f.loss_scale = 8192;
  f.scale_clean_steps = 1234;
  f.scale_skipped_steps = 7;
  f.data_path = "/data/faces, v2";  // and the absolute path of the run's data
  save_checkpoint(dir.str(), *a, oa, f, 3);
  const TrainerState rf = load_checkpoint(dir.str(), *b, ob);
  CHECK(rf.loss_scale == 8192);
  CHECK(rf.scale_clean_steps == 1234);
  CHECK(rf.scale_skipped_steps == 7);
  CHECK(rf.data_path == "/data/faces, v2");

  // The same training continued on both gives the same bits: nothing else was hidden state.
  train_a_bit(*a, oa, 9);
  train_a_bit(*b, ob, 9);
  CHECK(same_bytes(a->params().values(), b->params().values()));
}

TEST_CASE("checkpoint names, keep-last-N, the latest symlink and every resume path form") {
  CkDir dir;
  auto m = lenet(1);
  SGD o(m->params(), sgd_opts());
  for (int e = 1; e <= 4; ++e) save_checkpoint(dir.str(), *m, o, state_at(e), 2);
  std::set<std::string> names;
  for (const auto& d : fs::directory_iterator(dir.path / "checkpoints"))
    names.insert(d.path().filename().string());
  CHECK(names == std::set<std::string>{"epoch-0003", "epoch-0004"});
  CHECK(fs::is_symlink(dir.path / "latest"));
  CHECK(latest_target(dir.path) == "checkpoints/epoch-0004");

  const std::string e4 = fs::canonical(dir.path / "checkpoints" / "epoch-0004").string();
  CHECK(resolve_checkpoint(dir.str()).dir == e4);
  CHECK(resolve_checkpoint((dir.path / "latest").string()).dir == e4);
  const CheckpointPaths p3 = resolve_checkpoint((dir.path / "checkpoints" / "epoch-0003").string());
  CHECK(p3.dir == fs::canonical(dir.path / "checkpoints" / "epoch-0003").string());
  CHECK(p3.run_dir == fs::canonical(dir.path).string());
  CHECK(p3.trainer == p3.dir + "/trainer.json");
  CHECK(read_trainer_state(p3.trainer).epoch == 3);

  // Mid-epoch (a stop signal): a step-based name; keep_last 0 keeps everything.
  TrainerState mid = state_at(4);
  mid.step_in_epoch = 17;
  mid.global_step = 417;
  CHECK(checkpoint_name(mid) == "step-00000417");
  save_checkpoint(dir.str(), *m, o, mid, 0);
  CHECK(latest_target(dir.path) == "checkpoints/step-00000417");
  CHECK(fs::exists(dir.path / "checkpoints" / "epoch-0003"));

  // Resumed from epoch 3 and saving epoch 4 again: the directory is swapped, still complete.
  const std::string old_trainer = slurp(dir.path / "checkpoints" / "epoch-0004" / "trainer.json");
  TrainerState again = state_at(4);
  again.samples_seen = 1;
  save_checkpoint(dir.str(), *m, o, again, 2);
  CHECK(latest_target(dir.path) == "checkpoints/epoch-0004");
  CHECK(read_trainer_state((dir.path / "latest" / "trainer.json").string()).samples_seen == 1);
  CHECK(slurp(dir.path / "checkpoints" / "epoch-0004" / "trainer.json") != old_trainer);
  names.clear();
  for (const auto& d : fs::directory_iterator(dir.path / "checkpoints"))
    names.insert(d.path().filename().string());
  CHECK(names == std::set<std::string>{"epoch-0004", "step-00000417"});  // the last two written

  // Rank 0 died after publishing a checkpoint but before writing latest: the run directory
  // resumes from its newest complete checkpoint (an unfinished .tmp- one is not a candidate).
  fs::remove(dir.path / "latest");
  fs::create_directories(dir.path / "checkpoints" / ".tmp-epoch-0005-1-1");
  CHECK(resolve_checkpoint(dir.str()).dir == e4);

  CHECK(error_of([&] { resolve_checkpoint((dir.path / "nope").string()); }).find("nope: no such") !=
        std::string::npos);
  CkDir empty;
  CHECK(error_of([&] { resolve_checkpoint(empty.str()); }).find("no latest checkpoint") !=
        std::string::npos);
}

TEST_CASE("checkpoint crash at any stage never breaks latest or an existing checkpoint") {
  CkDir dir;
  auto m = lenet(1);
  SGD o(m->params(), sgd_opts());
  save_checkpoint(dir.str(), *m, o, state_at(4), 2);
  const fs::path e4 = dir.path / "checkpoints" / "epoch-0004";
  const std::string model4 = slurp(e4 / "model.safetensors");
  const std::string optim4 = slurp(e4 / "optimizer.safetensors");
  const std::string trainer4 = slurp(e4 / "trainer.json");
  train_a_bit(*m, o, 3);  // epoch 5's state differs from epoch 4's

  for (const char* at : {"model", "optimizer", "trainer", "published"}) {
    CAPTURE(at);
    const std::string msg = error_of([&] {
      save_checkpoint(dir.str(), *m, o, state_at(5), 2, [&](std::string_view s) {
        if (s == at) MPICNN_FAIL("simulated crash after ", s);
      });
    });
    CHECK(msg.find("simulated crash") != std::string::npos);
    CHECK(latest_target(dir.path) == "checkpoints/epoch-0004");
    CHECK(slurp(e4 / "model.safetensors") == model4);
    CHECK(slurp(e4 / "optimizer.safetensors") == optim4);
    CHECK(slurp(e4 / "trainer.json") == trainer4);
    for (const auto& d : fs::directory_iterator(dir.path / "checkpoints"))
      CHECK(d.path().filename().string().rfind(".tmp-", 0) != 0);
    auto fresh = lenet(5);
    SGD fo(fresh->params(), sgd_opts());
    CHECK(load_checkpoint(dir.str(), *fresh, fo).epoch == 4);
    fs::remove_all(dir.path / "checkpoints" / "epoch-0005");
  }

  // A hard crash leaves a temp directory (no guard ran): it is never resolved, and the next
  // save clears it.
  const fs::path stale = dir.path / "checkpoints" / ".tmp-epoch-0009-1-1";
  fs::create_directories(stale);
  spit(stale / "trainer.json", "{");
  CHECK(resolve_checkpoint(dir.str()).dir == fs::canonical(e4).string());
  save_checkpoint(dir.str(), *m, o, state_at(5), 2);
  CHECK_FALSE(fs::exists(stale));
  CHECK(latest_target(dir.path) == "checkpoints/epoch-0005");
}

TEST_CASE("checkpoint load errors name the file and change nothing") {
  CkDir dir;
  auto m = lenet(1);
  SGD o(m->params(), sgd_opts());
  train_a_bit(*m, o, 1);
  const CheckpointPaths good = save_checkpoint(dir.str(), *m, o, state_at(2), 2);

  // Each case damages a fresh copy of the checkpoint and expects these words in the message.
  struct Case {
    const char* what;
    std::function<void(const fs::path&)> damage;
    std::vector<std::string> words;
  };
  const std::vector<Case> cases = {
      {"truncated model", [](const fs::path& d) { fs::resize_file(d / "model.safetensors", 100); },
       {"model.safetensors", "truncated"}},
      {"flipped optimizer byte",
       [](const fs::path& d) {
         std::string s = slurp(d / "optimizer.safetensors");
         s[s.size() - 5] ^= 0x40;
         spit(d / "optimizer.safetensors", s);
       },
       {"optimizer.safetensors: tensor 'optim.momentum_buffer.", "fails its CRC32 check (stored ",
        "the file is corrupt"}},
      {"flipped trainer.json digit (still valid JSON)",
       [](const fs::path& d) {
         std::string s = slurp(d / "trainer.json");
         const size_t at = s.find("\"global_step\": 200");
         REQUIRE(at != std::string::npos);
         s[at + 15] ^= 0x01;  // 200 -> 300 ('2' ^ 1 = '3')
         spit(d / "trainer.json", s);
       },
       {"trainer.json: fails its CRC32 check (stored ", "the file is corrupt"}},
      {"trainer.json without its CRC",
       [](const fs::path& d) {
         auto j = nlohmann::json::parse(slurp(d / "trainer.json"));
         j.erase("crc32");
         spit(d / "trainer.json", j.dump());
       },
       {"trainer.json: field 'crc32' missing"}},
      {"model file of another checkpoint (valid on its own)",
       [](const fs::path& d) {
         auto other = lenet(3);
         other->save_state_dict((d / "model.safetensors").string());
       },
       {"model.safetensors: ", "but ", "trainer.json records", "replaced or is corrupt"}},
      {"missing optimizer", [](const fs::path& d) { fs::remove(d / "optimizer.safetensors"); },
       {"optimizer.safetensors: missing"}},
      {"missing trainer.json", [](const fs::path& d) { fs::remove(d / "trainer.json"); },
       {"trainer.json"}},
      {"truncated trainer.json", [](const fs::path& d) { fs::resize_file(d / "trainer.json", 40); },
       {"trainer.json", "not valid JSON"}},
      {"future version",
       [](const fs::path& d) {
         auto j = nlohmann::json::parse(slurp(d / "trainer.json"));
         j["format_version"] = 99;
         spit(d / "trainer.json", j.dump());
       },
       {"trainer.json", "version 99"}},
      {"missing field",
       [](const fs::path& d) {
         auto j = legacy_v1(slurp(d / "trainer.json"));
         j.erase("global_step");
         spit(d / "trainer.json", j.dump());
       },
       {"trainer.json", "'global_step' missing"}},
      // A well-formed file with a consistent record but a tensor of the wrong shape: the
      // checksum passes, so the shape check is what must catch it.
      {"wrong shape",
       [](const fs::path& d) {
         auto other = build_model("lenet", {.num_classes = 5, .in_channels = 1}, 3);
         other->save_state_dict((d / "model.safetensors").string());
         const std::string bytes = slurp(d / "model.safetensors");
         auto j = legacy_v1(slurp(d / "trainer.json"));
         j["files"]["model.safetensors"]["bytes"] = bytes.size();
         j["files"]["model.safetensors"]["crc32"] =
             uint32_t(::crc32(::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()),
                              uInt(bytes.size())));
         spit(d / "trainer.json", j.dump());
       },
       {"model.safetensors", "shape [5, 84]", "needs [10, 84]"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    CkDir copy;
    const fs::path ck = copy.path / "epoch-0002";
    fs::copy(good.dir, ck, fs::copy_options::recursive);
    c.damage(ck);
    auto target = lenet(9);
    SGD to(target->params(), sgd_opts());
    Tensor before = Tensor::empty(target->params().values().shape());
    std::memcpy(before.data(), target->params().values().data(), size_t(before.numel()) * 4);
    const std::string msg = error_of([&] { load_checkpoint(ck.string(), *target, to); });
    CAPTURE(msg);
    REQUIRE_FALSE(msg.empty());
    for (const std::string& w : c.words) CHECK(msg.find(w) != std::string::npos);
    CHECK(same_bytes(before, target->params().values()));
    CHECK(to.steps() == 0);
  }

  auto r20 = build_model("resnet20", {.num_classes = 10, .in_channels = 3}, 1);
  SGD ro(r20->params(), sgd_opts());
  std::string msg = error_of([&] { load_checkpoint(good.dir, *r20, ro); });
  CHECK(msg.find("trainer.json: checkpoint of model 'lenet', not 'resnet20'") != std::string::npos);
  auto l = lenet(2);
  AdamW ao(l->params(), AdamWOptions{});
  msg = error_of([&] { load_checkpoint(good.dir, *l, ao); });
  CHECK(msg.find("trainer.json: checkpoint of optimizer 'sgd', not 'adamw'") != std::string::npos);
  SGD other(l->params(), {.lr = 0.05, .momentum = 0.5, .weight_decay = 1e-4});
  msg = error_of([&] { load_checkpoint(good.dir, *l, other); });
  CHECK(msg.find("optimizer.safetensors") != std::string::npos);
  CHECK(msg.find("momentum") != std::string::npos);
}

TEST_CASE("checkpoint model.safetensors of resnet18 loads into torchvision's resnet18") {
  CkDir dir;
  auto m = build_model("resnet18", {.num_classes = 10, .in_channels = 3}, 4);
  SGD o(m->params(), {.lr = 0.1});
  const CheckpointPaths p = save_checkpoint(dir.str(), *m, o, state_at(1), 1);
  // Strict load (same keys, shapes and dtypes, in state_dict order), then a value check.
  const std::string script =
      "import sys; sys.path.insert(0, sys.argv[1] + '/tests/python')\n"
      "import st, torch, torchvision\n"
      "sd = st.load(sys.argv[2])\n"
      "net = torchvision.models.resnet18(num_classes=10)\n"
      "ref = net.state_dict()\n"
      "assert list(sd) == list(ref), 'key order differs'\n"
      "for k in ref: assert sd[k].shape == ref[k].shape and sd[k].dtype == ref[k].dtype, k\n"
      "net.load_state_dict(sd, strict=True)\n"
      "assert torch.equal(net.state_dict()['layer4.1.conv2.weight'], sd['layer4.1.conv2.weight'])\n";
  const fs::path py = dir.path / "check.py";
  spit(py, script);
  const char* env = std::getenv("PYTHON");
  const std::string cmd = std::string(env && *env ? env : "/usr/bin/python3") + " '" + py.string() +
                          "' '" + testing::source_dir() + "' '" + p.model + "'";
  const int status = std::system(cmd.c_str());
  CHECK((status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0));
}

TEST_CASE("checkpoint stop signals set the flag and record which signal") {
  install_stop_signals();
  clear_stop_request();
  CHECK_FALSE(stop_requested());
  CHECK(stop_signal() == 0);
  ::raise(SIGUSR1);
  CHECK(stop_requested());
  CHECK(stop_signal() == SIGUSR1);
  clear_stop_request();
  ::raise(SIGTERM);  // would kill the test binary if the handler were not installed
  CHECK(stop_requested());
  CHECK(stop_signal() == SIGTERM);
  clear_stop_request();
  restore_stop_signals();
  CHECK_FALSE(stop_requested());
}
