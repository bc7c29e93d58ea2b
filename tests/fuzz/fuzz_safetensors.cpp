// libFuzzer harness: a safetensors file (io/safetensors.h), header and body. The input is the
// whole file; a reader that constructs then has every tensor read back the ways the loaders
// read them (as float, double, int64, raw bytes), which exercises the dtype conversions and
// the float-range checks on data the header only described.
#include <cstdint>
#include <vector>

#include "core/check.h"
#include "io/safetensors.h"

using namespace mpicnn;

namespace {
template <class F>
void expect_error_or_ok(F&& f) {
  try {
    f();
  } catch (const Error&) {
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const SafetensorsReader r =
        SafetensorsReader::from_bytes(std::vector<uint8_t>(data, data + size), "fuzz.safetensors");
    for (const auto& [key, value] : r.metadata()) (void)r.metadata(key);
    for (const TensorInfo& t : r.tensors()) {
      const std::span<const uint8_t> b = r.bytes(t.name);
      if (int64_t(b.size()) != t.nbytes()) __builtin_trap();
      if (dtype_is_float(t.dtype)) {
        expect_error_or_ok([&] { (void)r.read_f32(t.name); });  // F64 beyond float range: an Error
        (void)r.read_f64(t.name);
      } else if (dtype_is_int(t.dtype)) {
        expect_error_or_ok([&] { (void)r.read_i64(t.name); });  // U64 beyond int64: an Error
        if (t.shape.empty()) expect_error_or_ok([&] { (void)r.read_i64_scalar(t.name); });
      }
    }
  } catch (const Error&) {
    // Rejected with a message: what bad input should get.
  }
  return 0;
}
