// Faster R-CNN training-step and inference throughput (images/s) and peak memory on synthetic
// images, for bench/compare_detect.sh, which runs torchvision's FasterRCNN next to it
// (bench/torch_detect_bench.py: same model, image size, batch, targets and threads).
//   build/release/bench/detect_bench --model fasterrcnn_resnet18_fpn --size 320 --batch 2
//                                    --mode train|infer [--steps 5] [--warmup 2] [--threads N]
// Images are size x size with three boxes each; min_size = size, so no resize happens, and the
// batch is padded to a multiple of 32 as torchvision does. A training step is forward, the four
// losses, backward and an SGD update; inference is forward and postprocessing.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/device.h"
#include "core/rng.h"
#include "core/threads.h"
#include "core/timer.h"
#include "detect/faster_rcnn.h"
#include "optim/sgd.h"

using namespace mpicnn;

int main(int argc, char** argv) {
  try {
    std::string model_name = "fasterrcnn_resnet18_fpn", mode = "train";
    int size = 320, batch = 2, steps = 5, warmup = 2, threads = default_num_threads();
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string k = argv[i], v = argv[i + 1];
      if (k == "--model") model_name = v;
      else if (k == "--mode") mode = v;
      else if (k == "--size") size = std::stoi(v);
      else if (k == "--batch") batch = std::stoi(v);
      else if (k == "--steps") steps = std::stoi(v);
      else if (k == "--warmup") warmup = std::stoi(v);
      else if (k == "--threads") threads = std::stoi(v);
      else FAIL("detect_bench: unknown flag ", k);
    }
    CHECK(mode == "train" || mode == "infer", "--mode: train or infer, got ", mode);
    set_num_threads(threads);
    detect::FasterRcnnOptions o;
    o.num_classes = 4;
    o.transform.min_size = size;
    auto model = detect::make_faster_rcnn(model_name, o, 1);
    detect::FasterRcnnNet& net = detect::faster_rcnn_net(*model);
    const int64_t padded = (size + 31) / 32 * 32;
    Tensor images = Tensor::zeros({batch, 3, padded, padded});
    const Rng rng(3, 0);
    std::vector<float> pixels(size_t(3 * size * size));
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = rng.uniform(i);
    std::vector<detect::DetectionTarget> targets;
    for (int n = 0; n < batch; ++n) {
      detect::transform_into(images, n, pixels.data(), size, size, o.transform);
      const float s = float(size);
      targets.push_back({{0.1f * s, 0.1f * s, 0.4f * s, 0.5f * s, 0.5f * s, 0.2f * s, 0.9f * s,
                          0.6f * s, 0.3f * s, 0.6f * s, 0.6f * s, 0.95f * s},
                         {1, 2, 3}});
    }
    const std::vector<detect::Size2> sizes(size_t(batch), detect::Size2{size, size});
    model->plan(images.shape(), exec_overrides(ExecConfig{}));
    const bool train = mode == "train";
    model->set_training(train);
    SGD sgd(model->params(), SgdOptions{.lr = 1e-3, .momentum = 0.9, .weight_decay = 1e-4});
    Tensor ones = Tensor::empty({detect::FasterRcnnNet::kLosses});
    ones.fill(1.f);
    std::vector<double> times;
    for (int s = 0; s < warmup + steps; ++s) {
      Timer t;
      net.set_batch(sizes, train ? targets : std::vector<detect::DetectionTarget>{}, 7, uint64_t(s) * 64);
      model->forward(images);
      if (train) {
        model->params().zero_grad();
        model->backward(ones);
        sgd.step();
      }
      if (s >= warmup) times.push_back(t.seconds());
    }
    std::sort(times.begin(), times.end());
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    std::printf("engine=mpicnn model=%s mode=%s size=%d batch=%d threads=%d images_per_s=%.3f "
                "peak_rss_mb=%.1f\n",
                model_name.c_str(), mode.c_str(), size, batch, threads,
                batch / times[times.size() / 2], double(ru.ru_maxrss) / 1024.0);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "detect_bench: %s\n", e.message().c_str());
    return 1;
  }
}
