// What a run does with its model: classify images, or detect objects in them (Faster R-CNN).
// Every branch on the task reads this enum; task_name gives the word --task takes and
// checkpoints and reports record.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mpicnn {

enum class Task { Classify, Detection };

inline const char* task_name(Task t) { return t == Task::Detection ? "detection" : "classify"; }

// Every task's name, in enum order (a --task flag's choices).
inline std::vector<std::string> task_names() {
  return {task_name(Task::Classify), task_name(Task::Detection)};
}

// The task named `name`, or none.
inline std::optional<Task> parse_task(std::string_view name) {
  for (Task t : {Task::Classify, Task::Detection})
    if (name == task_name(t)) return t;
  return std::nullopt;
}

}  // namespace mpicnn
