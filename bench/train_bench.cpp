// Training-step and inference throughput of one registry model on synthetic data (images/s),
// and this process's peak memory. bench/compare_train.sh runs it next to PyTorch
// (bench/torch_train_bench.py, same model, batch, threads and step) and prints the ratios.
//   build/release/bench/train_bench --model resnet18 --size 32 --batch 64 --mode train
//                                   [--steps 10] [--warmup 3] [--threads N]
//                                   [--device cpu|cuda] [--precision fp32|tf32|bf16|fp16]
//                                   [--gpu-layout nchw|nhwc]
//                                   [--freeze-backbone 0|1] [--profile 0|1]
// --freeze-backbone 1 times a fine-tuning step: everything but the model's head frozen (no
// parameter gradients, backward stops at the head, no optimizer update of the backbone).
// On the GPU each timed step ends with a device synchronise (bench/gpu_train.sh).
// --profile 1 also prints, on stderr, each layer's forward and backward milliseconds per timed
// step (core/profile.h), slowest first, with totals per layer kind and the time spent outside
// the layers (what blocks do between their layers; the loss and the optimizer have rows). On
// the GPU these are GPU times between CUDA events around each layer's work, read once after
// each step's synchronise; the events' own cost makes the profiled step a little slower.
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/blas.h"
#include "core/check.h"
#include "core/device.h"
#include "core/profile.h"
#include "core/rng.h"
#include "core/threads.h"
#include "core/timer.h"
#include "layers/softmax_xent.h"
#include "models/aux_loss.h"
#include "models/registry.h"
#include "optim/sgd.h"

using namespace mpicnn;

namespace {

// The layer table of --profile: milliseconds per step, slowest layers first.
void print_profile(int steps, const std::vector<double>& times) {
  std::vector<profile::Row> rows = profile::rows();
  double step_ms = 0, layers_ms = 0;
  for (double t : times) step_ms += t * 1e3 / steps;
  struct Kind {
    std::string name;
    double forward_ms = 0, backward_ms = 0;
    double ms() const { return forward_ms + backward_ms; }
  };
  std::vector<Kind> kinds;
  for (const profile::Row& r : rows) {
    const double f = r.forward_s * 1e3 / steps, b = r.backward_s * 1e3 / steps;
    layers_ms += f + b;
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](auto& k) { return k.name == r.kind; });
    if (it == kinds.end()) it = kinds.insert(kinds.end(), Kind{r.kind});
    it->forward_ms += f, it->backward_ms += b;
  }
  std::stable_sort(rows.begin(), rows.end(), [](const profile::Row& a, const profile::Row& b) {
    return a.forward_s + a.backward_s > b.forward_s + b.backward_s;
  });
  std::sort(kinds.begin(), kinds.end(), [](auto& a, auto& b) { return a.ms() > b.ms(); });
  std::fprintf(stderr, "profile: %.1f ms per step (mean of %d), per layer in ms per step\n",
               step_ms, steps);
  std::fprintf(stderr, "%-36s %-20s %9s %9s %6s\n", "layer", "kind", "forward", "backward", "%");
  for (const profile::Row& r : rows) {
    const double f = r.forward_s * 1e3 / steps, b = r.backward_s * 1e3 / steps;
    std::fprintf(stderr, "%-36s %-20s %9.2f %9.2f %6.1f\n", r.name.c_str(), r.kind.c_str(), f, b,
                 100 * (f + b) / step_ms);
  }
  std::fprintf(stderr, "per kind:              forward  backward (ms)\n");
  for (const Kind& k : kinds)
    std::fprintf(stderr, "  %-20s %9.2f %9.2f ms %6.1f%%\n", k.name.c_str(), k.forward_ms,
                 k.backward_ms, 100 * k.ms() / step_ms);
  std::fprintf(stderr, "  %-20s %19.2f ms %6.1f%%\n", "(outside the layers)", step_ms - layers_ms,
               100 * (step_ms - layers_ms) / step_ms);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string model_name = "resnet18", mode = "train", device = "cpu", precision = "auto",
                gpu_layout = "nchw";
    int size = 32, batch = 64, steps = 10, warmup = 3, threads = default_num_threads();
    bool freeze_backbone = false, profiling = false;
    for (int i = 1; i < argc; ++i) {
      const std::string k = argv[i];
      CHECK(i + 1 < argc, k, " needs a value");
      const std::string v = argv[++i];
      if (k == "--model") model_name = v;
      else if (k == "--mode") mode = v;
      else if (k == "--size") size = std::stoi(v);
      else if (k == "--batch") batch = std::stoi(v);
      else if (k == "--steps") steps = std::stoi(v);
      else if (k == "--warmup") warmup = std::stoi(v);
      else if (k == "--threads") threads = std::stoi(v);
      else if (k == "--device") device = v;
      else if (k == "--precision") precision = v;
      else if (k == "--gpu-layout") gpu_layout = v;
      else if (k == "--freeze-backbone") freeze_backbone = v == "1" || v == "true";
      else if (k == "--profile") profiling = v == "1" || v == "true";
      else FAIL("unknown option ", k);
    }
    CHECK(mode == "train" || mode == "infer", "--mode must be train or infer, got '", mode, "'");
    CHECK(steps >= 1 && warmup >= 0 && batch >= 1 && size >= 1, "bad --steps/--warmup/--batch/--size");
    set_num_threads(threads);
    const ExecConfig exec =
        make_exec_config({.device = device, .precision = precision, .gpu_layout = gpu_layout}, 0)
            .for_inference(mode == "infer");
    const bool cuda = exec.device == Device::CUDA;
    const int classes = 1000;
    auto model = build_model(model_name, {.num_classes = classes, .in_channels = 3}, 1);
    model->to(exec.device);
    const Shape in{batch, 3, size, size};
    const Shape out = model->plan(in, exec);
    model->set_training(mode == "train");
    Tensor host_x = Tensor::empty(in);
    Rng rng(7, 1);
    for (int64_t i = 0; i < host_x.numel(); ++i) host_x.data()[i] = rng.normal(uint64_t(i));
    InputStage stage(exec.device, batch, Shape{3, size, size}, exec.activations);
    const Tensor x = stage.put(host_x);
    std::vector<int32_t> targets;
    for (int n = 0; n < batch; ++n) targets.push_back(int32_t(rng.below(uint64_t(n), classes)));
    if (freeze_backbone) {
      std::vector<std::string> backbone;
      for (const StateEntry& e : model->params().entries())
        if (e.kind == StateKind::Param && !model->in_head(e.name)) backbone.push_back(e.name);
      model->freeze(backbone);
    }
    SGD opt(model->params(), {.lr = 0.01, .momentum = 0.9, .weight_decay = 5e-4});
    SoftmaxCrossEntropy loss;
    loss.plan(batch, classes, exec.device);
    AuxLosses aux_losses;  // Inception v3's and GoogLeNet's heads, as the trainer's step
    aux_losses.plan(*model, batch, 0, exec.device);
    Tensor dlogits = Tensor::empty(out, exec.device);

    // CPU time too: with --threads 1 it is a load-independent measure for A/B comparisons of
    // our own changes on a busy machine (wall time is what the comparison with PyTorch uses).
    auto cpu_seconds = [] {
      timespec ts{};
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
      return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
    };
    // The step's work outside the model, in the profile under these names.
    static const std::string kZeroGrad = "(zero_grad)", kLoss = "(loss forward+backward)",
                             kStep = "(optimizer step)";
    std::vector<double> times, cpu_times;
    for (int s = 0; s < warmup + steps; ++s) {
      if (s == warmup) {
        profile::set_enabled(profiling, cuda);
        profile::reset();
      }
      Timer t;
      const double c0 = cpu_seconds();
      if (mode == "train") {
        {
          profile::Scope timed(kZeroGrad, "(optimizer)");
          model->params().zero_grad();
        }
        const Tensor& logits = model->forward(x);
        {
          profile::Scope timed(kLoss, "(loss)");
          loss.forward(logits, targets.data());
          aux_losses.forward(*model, targets.data());
          loss.backward(dlogits, targets.data());
        }
        model->backward(dlogits, aux_losses.backward(targets.data(), 1));
        profile::Scope timed(kStep, "(optimizer)");
        opt.step();
      } else {
        model->forward(x);
      }
      if (cuda) gpu::backend().synchronize();
      profile::collect();
      if (s >= warmup) {
        times.push_back(t.seconds());
        cpu_times.push_back(cpu_seconds() - c0);
      }
    }
    profile::set_enabled(false);
    if (profiling) print_profile(steps, times);
    std::sort(times.begin(), times.end());
    std::sort(cpu_times.begin(), cpu_times.end());
    const double median = times[times.size() / 2], cpu_median = cpu_times[cpu_times.size() / 2];
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    std::printf(
        "engine=mpicnn model=%s mode=%s size=%d batch=%d threads=%d images_per_s=%.2f "
        "peak_rss_mb=%.1f cpu_ms_per_step=%.1f gemm=%s device=%s frozen_backbone=%d\n",
        model_name.c_str(), mode.c_str(), size, batch, threads, batch / median,
        ru.ru_maxrss / 1024.0, cpu_median * 1e3, gemm_backend_name(gemm_backend()),
        describe_device(exec).c_str(), int(freeze_backbone));
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "train_bench: %s\n", e.message().c_str());
    return 2;
  }
}
