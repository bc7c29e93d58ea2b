// What tests/test_model_parity.cpp (the float32 engine) and tests/f64/test_model_parity_f64.cpp
// (the same sources built with real = double, namespace mpicnn_f64) share: the cases and the
// error measure. Plain C++ only, no engine types, because the two files see two different
// engines under the same names.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace parity {

// One parity run: `steps` optimizer steps on one fixed batch from PyTorch's initial weights
// (tests/python/model_parity.py computes the references from the same fields).
struct Case {
  std::string tag, model, optimizer;  // optimizer: "sgd" or "adamw"
  int batch, size, classes, in_channels;
  int seed;
  double lr, momentum, weight_decay;  // momentum: SGD only
  bool nesterov, exclude_bn_bias;
};
constexpr int kSteps = 3;

// Defined in test_model_parity.cpp (it needs the float engine's registry).
const std::vector<Case>& cases();
const Case& case_named(const std::string& tag);

// Checks the float64 engine on case `c` against TAG.*.safetensors in `dir` (every check is a
// doctest CHECK whose message starts "float64"). Defined in tests/f64/test_model_parity_f64.cpp.
void check_f64(const Case& c, const std::string& dir);

// A stored F64 tensor read in place (no copy: a VGG's references are GBs, and copying them
// into fresh vectors made page clearing most of the check's time): element i as a double.
struct F64View {
  const unsigned char* bytes = nullptr;
  size_t n = 0;
  size_t size() const { return n; }
  double operator[](size_t i) const {
    double v;
    std::memcpy(&v, bytes + 8 * i, sizeof v);  // safetensors does not align its tensors
    return v;
  }
};

// a[i] - b[i] in double, for comparing updates (value - initial) without a copy.
template <class A, class B>
struct DiffView {
  A a;
  B b;
  size_t n;
  size_t size() const { return n; }
  double operator[](size_t i) const { return double(a[i]) - double(b[i]); }
};
template <class A, class B>
DiffView<A, B> diff_view(A a, B b, size_t n) {
  return {a, b, n};
}

// ||got - want|| / max(||want||, floor), in double. The floor matters only for tensors whose
// exact value is (nearly) zero, such as the gradient of a conv bias followed by BatchNorm,
// which the normalisation removes exactly: a relative error of rounding against 1e-17 means
// nothing. `mask` (optional, same length): only the entries where it is non-zero count.
// got: a pointer or view (operator[]); want: a vector or view (size() and operator[]).
template <class G, class W>
double rel_err(const G& got, const W& want, double floor = 0,
               const std::vector<int64_t>* mask = nullptr) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (mask && (*mask)[i] == 0) continue;
    const double w = double(want[i]), d = double(got[i]) - w;
    num += d * d;
    den += w * w;
  }
  return std::sqrt(num) / std::max(std::sqrt(den), floor);
}

// With MPICNN_PARITY_LOG=FILE set, every compared quantity is appended to FILE as
// "ENGINE CASE KEY ERROR TOLERANCE" (how the tolerances were measured: tests/README.md).
inline void log_error(const char* engine, const std::string& tag, const std::string& key,
                      double err, double tol) {
  static FILE* out = [] {
    const char* path = std::getenv("MPICNN_PARITY_LOG");
    return path && *path ? std::fopen(path, "a") : nullptr;
  }();
  if (!out) return;
  std::fprintf(out, "%s %s %s %.3e %.3e\n", engine, tag.c_str(), key.c_str(), err, tol);
  std::fflush(out);
}

}  // namespace parity
