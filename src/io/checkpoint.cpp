// Checkpoint save / resolve / load and the stop-signal flag (POSIX: rename, renameat2,
// symlink, sigaction). Not the decision of when to checkpoint: that is the trainer's; not
// trainer.json's fields (trainer_record.cpp).
#include "io/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/check.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "io/trainer_record.h"

namespace mpicnn {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char* const kModelFile = "model.safetensors";
const char* const kOptimFile = "optimizer.safetensors";
const char* const kTrainerFile = "trainer.json";

std::string iso_utc(std::chrono::system_clock::time_point t) {
  const std::time_t s = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A rename or a new directory entry is durable only once its directory is fsync'ed.
void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  CHECK(fd >= 0, dir.string(), ": cannot open directory: ", std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  CHECK(rc == 0, dir.string(), ": fsync failed: ", std::strerror(err));
}

// Removes a directory when the save that made it fails, so failed saves leave no litter.
struct TempDirGuard {
  fs::path path;
  ~TempDirGuard() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  return std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

bool is_checkpoint_name(const std::string& n) {
  return n.rfind("epoch-", 0) == 0 || n.rfind("step-", 0) == 0;
}

void update_latest(const fs::path& run, const std::string& target) {
  const fs::path tmp = run / (".latest.tmp-" + unique_suffix());
  std::error_code ec;
  fs::remove(tmp, ec);
  CHECK(::symlink(target.c_str(), tmp.c_str()) == 0, tmp.string(), ": cannot create symlink: ",
        std::strerror(errno));
  if (::rename(tmp.c_str(), (run / "latest").c_str()) != 0) {
    const int err = errno;
    fs::remove(tmp, ec);
    FAIL((run / "latest").string(), ": cannot replace: ", std::strerror(err));
  }
  fsync_dir(run);
}

// Keeps the `keep_last` most recently saved checkpoints (by trainer.json's saved_unix_ms,
// then global step, then name). A checkpoint whose trainer.json cannot be read is left alone:
// pruning must never be the thing that destroys evidence. Removal first renames the
// directory to a hidden name, so a crash mid-removal never leaves a half-deleted visible one.
// The published checkpoints of RUN/checkpoints (complete: their trainer.json reads), newest
// first (by save time, then global step, then name).
std::vector<std::string> published_checkpoints(const fs::path& ckdir) {
  struct Item {
    int64_t ms, step;
    std::string name;
  };
  std::vector<Item> items;
  std::error_code ec;
  if (!fs::is_directory(ckdir, ec)) return {};
  for (const auto& d : fs::directory_iterator(ckdir)) {
    const std::string n = d.path().filename().string();
    if (!d.is_directory() || !is_checkpoint_name(n)) continue;
    try {
      const TrainerState s = read_trainer_state((d.path() / kTrainerFile).string());
      items.push_back({s.saved_unix_ms, s.global_step, n});
    } catch (const Error&) {
    }
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return std::tie(a.ms, a.step, a.name) > std::tie(b.ms, b.step, b.name);
  });
  std::vector<std::string> names;
  for (const Item& it : items) names.push_back(it.name);
  return names;
}

void prune(const fs::path& ckdir, int keep_last, const std::string& keep_name) {
  if (keep_last <= 0) return;
  int kept = 0;
  for (const std::string& name : published_checkpoints(ckdir)) {
    if (name == keep_name || kept < keep_last - 1) {
      if (name != keep_name) ++kept;
      continue;
    }
    const fs::path gone = ckdir / (".del-" + name + "-" + unique_suffix());
    std::error_code ec;
    fs::rename(ckdir / name, gone, ec);
    if (!ec) fs::remove_all(gone, ec);
  }
  fsync_dir(ckdir);
}

}  // namespace

std::string checkpoint_name(const TrainerState& s) {
  char buf[48];
  if (s.step_in_epoch == 0)
    std::snprintf(buf, sizeof buf, "epoch-%04lld", static_cast<long long>(s.epoch));
  else
    std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(s.global_step));
  return buf;
}

namespace {

// The three files of a checkpoint, written into the (new, empty) directory `tmp`. trainer.json
// records the tensor files' sizes and CRC-32s as the writer computed them from the bytes it wrote
// (no second pass; a later load verifies every tensor against its own CRC-32 anyway).
void write_checkpoint_files(const fs::path& tmp, const Stateful& model, const Stateful& optimizer,
                            const TrainerState& st, const CheckpointHook& hook) {
  auto stage = [&](std::string_view s) {
    if (hook) hook(s);
  };
  json j = trainer_record::to_json(st);
  auto record = [&](const char* f, const FileDigest& d) {
    j["files"][f] = {{"bytes", d.bytes}, {"crc32", d.crc32}};
  };
  // "format: pt" is what safetensors' torch helpers write; loaders use it as a hint.
  record(kModelFile, model.write_state((tmp / kModelFile).string(), {{"format", "pt"}, {"mpicnn.model", st.model}}));
  stage("model");
  record(kOptimFile, optimizer.write_state((tmp / kOptimFile).string(), {{"mpicnn.model", st.model}}));
  stage("optimizer");

  j["crc32"] = crc32_hex(trainer_record::own_crc(j));
  const std::string text = j.dump(2) + "\n";
  write_file_atomic((tmp / kTrainerFile).string(),
                    {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  stage("trainer");
  fsync_dir(tmp);
}

// Where RUN/latest points now, for the line a failed save prints.
std::string latest_now(const fs::path& run) {
  std::error_code ec;
  const fs::path target = fs::read_symlink(run / "latest", ec);
  return ec ? "there is no earlier checkpoint" : (run / "latest").string() + " still points to " + target.string();
}

// One line for a save that failed before its checkpoint was published: the checkpoint, the file
// (by its name, not the temporary directory's) and the cause, e.g. "No space left on device".
[[noreturn]] void save_failed(const fs::path& run, const fs::path& final_dir, const fs::path& tmp,
                              const Error& e) {
  std::string why = e.message();
  const std::string tmp_prefix = tmp.string() + "/";
  for (size_t at; (at = why.find(tmp_prefix)) != std::string::npos;) why.erase(at, tmp_prefix.size());
  FAIL("checkpoint ", final_dir.string(), " not saved: ", why, "; ", latest_now(run));
}

}  // namespace

CheckpointPaths save_checkpoint(const std::string& run_dir, const Stateful& model,
                                const Stateful& optimizer, const TrainerState& state,
                                int keep_last, const CheckpointHook& hook) {
  CHECK(keep_last >= 0, "keep_last must be >= 0, got ", keep_last);
  const fs::path run(run_dir);
  const fs::path ckdir = run / "checkpoints";
  std::error_code ec;
  fs::create_directories(ckdir, ec);
  CHECK(!ec, ckdir.string(), ": cannot create: ", ec.message());
  // Leftovers of saves that crashed (temp and half-removed dirs) are never visible
  // checkpoints; clear them so they do not accumulate.
  for (const auto& d : fs::directory_iterator(ckdir)) {
    const std::string n = d.path().filename().string();
    if (n.rfind(".tmp-", 0) == 0 || n.rfind(".del-", 0) == 0) fs::remove_all(d.path(), ec);
  }

  const std::string name = checkpoint_name(state);
  const fs::path final_dir = ckdir / name;
  const fs::path tmp = ckdir / (".tmp-" + name + "-" + unique_suffix());
  TempDirGuard guard;  // removes the temporary directory (and what is in it) unless published

  TrainerState st = state;
  const auto now = std::chrono::system_clock::now();
  st.saved_at = iso_utc(now);
  st.saved_unix_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  st.model = model.state_name();
  st.optimizer = optimizer.state_name();
  if (st.run_started.empty()) st.run_started = st.saved_at;

  try {
    CHECK(fs::create_directory(tmp, ec) && !ec, tmp.string(), ": cannot create: ", ec.message());
    guard.path = tmp;
    write_checkpoint_files(tmp, model, optimizer, st, hook);
    if (!fs::exists(fs::symlink_status(final_dir))) {
      CHECK(::rename(tmp.c_str(), final_dir.c_str()) == 0, final_dir.string(),
            ": cannot publish: ", std::strerror(errno));
      guard.path.clear();
    } else {
      // Resumed from an earlier checkpoint and reached a name saved before: swap atomically so
      // `latest` (which may point here) never sees a missing or partial directory; the guard
      // then removes the old one, now at the temp name.
      CHECK(::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0,
            final_dir.string(), ": cannot replace: ", std::strerror(errno));
    }
  } catch (const Error& e) {
    save_failed(run, final_dir, tmp, e);
  }
  fsync_dir(ckdir);
  if (hook) hook("published");
  try {
    update_latest(run, "checkpoints/" + name);
  } catch (const Error& e) {
    FAIL("checkpoint ", final_dir.string(), " saved, but ", e.message(), "; ", latest_now(run));
  }
  if (hook) hook("latest");
  prune(ckdir, keep_last, name);

  CheckpointPaths p;
  p.dir = final_dir.string();
  p.run_dir = run.string();
  p.model = (final_dir / kModelFile).string();
  p.optimizer = (final_dir / kOptimFile).string();
  p.trainer = (final_dir / kTrainerFile).string();
  return p;
}

CheckpointPaths resolve_checkpoint(const std::string& arg) {
  CHECK(!arg.empty(), "--resume: empty checkpoint path");
  fs::path p(arg);
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(p, ec)) && !fs::exists(p, ec))
    FAIL(arg, ": symlink to missing ", fs::read_symlink(p, ec).string());
  CHECK(fs::is_directory(p, ec), arg, ": no such checkpoint or run directory");
  if (!fs::exists(p / kTrainerFile, ec)) {
    // A run directory: its latest pointer names the checkpoint. A run whose rank 0 died after
    // publishing its first checkpoint but before writing latest has none: its newest published
    // checkpoint is the one to continue.
    const fs::path latest = p / "latest";
    if (fs::is_symlink(fs::symlink_status(latest, ec)) && !fs::exists(latest, ec))
      FAIL(latest.string(), ": points to missing ", fs::read_symlink(latest, ec).string());
    if (fs::exists(latest, ec)) {
      p = latest;
    } else {
      const std::vector<std::string> published = published_checkpoints(p / "checkpoints");
      CHECK(!published.empty(), arg, ": not a checkpoint (no trainer.json) and no latest checkpoint in it");
      p = p / "checkpoints" / published.front();
    }
  }
  const fs::path dir = fs::canonical(p, ec);
  CHECK(!ec, p.string(), ": ", ec.message());
  CHECK(fs::exists(dir / kTrainerFile, ec), (dir / kTrainerFile).string(),
        ": missing (not a checkpoint directory)");
  CheckpointPaths r;
  r.dir = dir.string();
  if (dir.parent_path().filename() == "checkpoints") r.run_dir = dir.parent_path().parent_path().string();
  r.model = (dir / kModelFile).string();
  r.optimizer = (dir / kOptimFile).string();
  r.trainer = (dir / kTrainerFile).string();
  return r;
}

TrainerState read_trainer_state(const std::string& trainer_json_path) {
  return trainer_record::parse(trainer_json_path).first;
}

TrainerState load_checkpoint(const std::string& arg, Stateful& model, Stateful& optimizer) {
  const CheckpointPaths p = resolve_checkpoint(arg);
  auto [state, files] = trainer_record::parse(p.trainer);
  CHECK(state.model == model.state_name(), p.trainer, ": checkpoint of model '", state.model,
        "', not '", model.state_name(), "'");
  CHECK(state.optimizer == optimizer.state_name(), p.trainer, ": checkpoint of optimizer '",
        state.optimizer, "', not '", optimizer.state_name(), "'");
  const SafetensorsReader mr = trainer_record::open_recorded(p.model, files, p.trainer);
  const SafetensorsReader orr = trainer_record::open_recorded(p.optimizer, files, p.trainer);
  // Every check before any change: a failed load leaves model and optimizer as they were.
  model.check_state(mr);
  optimizer.check_state(orr);
  optimizer.read_state(orr);  // its own checks are all done before it changes anything
  model.read_state(mr);
  return state;
}

// ---- stop signals ----

namespace {
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the handler needs a lock-free atomic");
struct sigaction g_old_term, g_old_usr1;
bool g_installed = false;

extern "C" void on_stop_signal(int sig) { g_stop_signal.store(sig, std::memory_order_relaxed); }
}  // namespace

void install_stop_signals() {
  if (g_installed) return;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a blocking read or MPI wait resumes; the flag is polled later
  CHECK(::sigaction(SIGTERM, &sa, &g_old_term) == 0, "sigaction(SIGTERM): ", std::strerror(errno));
  CHECK(::sigaction(SIGUSR1, &sa, &g_old_usr1) == 0, "sigaction(SIGUSR1): ", std::strerror(errno));
  g_installed = true;
}

void restore_stop_signals() {
  if (!g_installed) return;
  ::sigaction(SIGTERM, &g_old_term, nullptr);
  ::sigaction(SIGUSR1, &g_old_usr1, nullptr);
  g_installed = false;
}

bool stop_requested() { return g_stop_signal.load(std::memory_order_relaxed) != 0; }
int stop_signal() { return g_stop_signal.load(std::memory_order_relaxed); }
void clear_stop_request() { g_stop_signal.store(0, std::memory_order_relaxed); }

}  // namespace mpicnn
