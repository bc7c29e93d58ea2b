// The evaluation tasks' shared pieces (see task.h): the results of a batch, and which task the
// options or the setup name.
#include "eval/task.h"

#include <utility>

#include "eval/detect_task.h"

namespace mpicnn::eval {

std::vector<uint64_t> Results::indices() const {
  std::vector<uint64_t> out;
  out.reserve(predictions.size() + detections.size());
  for (const Prediction& p : predictions) out.push_back(p.index);
  for (const ImageDetections& d : detections) out.push_back(d.index);
  return out;
}

void Results::append(Results&& more) {
  predictions.insert(predictions.end(), more.predictions.begin(), more.predictions.end());
  for (ImageDetections& d : more.detections) detections.push_back(std::move(d));
}

void Results::sort() {
  const auto by_index = [](const auto& a, const auto& b) { return a.index < b.index; };
  std::sort(predictions.begin(), predictions.end(), by_index);
  std::sort(detections.begin(), detections.end(), by_index);
}

std::unique_ptr<EvalTask> open_eval_task(const EvalOptions& o) {
  return is_detection_checkpoint(o) ? open_detect_task(o) : open_classify_task(o);
}

std::unique_ptr<EvalTask> make_eval_task(const EvalSetup& setup) {
  return setup.task == Task::Detection ? make_detect_task(setup) : make_classify_task(setup);
}

}  // namespace mpicnn::eval
