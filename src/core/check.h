// Error type and the always-on check macro used across the engine.
// Not for CUDA/MPI status codes: those get their own macros next to their backends.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace mpicnn {

// Thrown by CHECK and FAIL. message() is the human part ("x.safetensors: offsets overlap"),
// what() adds where it was raised. Apps print message() on one line and exit non-zero.
class Error : public std::runtime_error {
 public:
  Error(std::string message, const char* expr, const char* file, int line);
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace mpicnn

// MPICNN_CHECK(cond, msg...): never compiled out; msg parts are streamed together. CHECK is
// its short name (tests, which use doctest's CHECK, call MPICNN_CHECK).
#define MPICNN_CHECK(cond, ...)                                                                        \
  do {                                                                                          \
    if (!(cond))                                                                                \
      throw ::mpicnn::Error(::mpicnn::detail::concat("" __VA_OPT__(, ) __VA_ARGS__), #cond,     \
                            __FILE__, __LINE__);                                                \
  } while (0)

#define CHECK(cond, ...) MPICNN_CHECK(cond __VA_OPT__(, ) __VA_ARGS__)

// MPICNN_FAIL(msg...), short name FAIL: unconditional error, reported like CHECK.
#define MPICNN_FAIL(...) \
  throw ::mpicnn::Error(::mpicnn::detail::concat(__VA_ARGS__), nullptr, __FILE__, __LINE__)
#define FAIL(...) MPICNN_FAIL(__VA_ARGS__)
