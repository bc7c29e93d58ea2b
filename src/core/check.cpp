// Error formatting for CHECK/FAIL.
#include "core/check.h"

namespace mpicnn {

static std::string full_message(const std::string& message, const char* expr, const char* file,
                                int line) {
  std::ostringstream os;
  os << (message.empty() ? std::string("check failed") : message) << " [";
  if (expr) os << "CHECK(" << expr << ") at ";
  os << file << ":" << line << "]";
  return os.str();
}

Error::Error(std::string message, const char* expr, const char* file, int line)
    : std::runtime_error(full_message(message, expr, file, line)), message_(std::move(message)) {
  if (message_.empty()) message_ = std::string("check failed: ") + (expr ? expr : "?");
}

}  // namespace mpicnn
