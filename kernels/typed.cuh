// Element types of the channels-last typed activations (core/format.h) on the device: the
// storage type of each Elem, float loads and rounded stores, and the switch from a runtime
// Elem to a kernel template. Internal to kernels/.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common.cuh"

namespace mpicnn::gpu {

template <Elem T> struct Storage;
template <> struct Storage<Elem::F32> { using type = float; };
template <> struct Storage<Elem::BF16> { using type = __nv_bfloat16; };
template <> struct Storage<Elem::F16> { using type = __half; };
template <Elem T> using storage_t = typename Storage<T>::type;

// Widening is exact; narrowing rounds to nearest even (core/half.h's host conversions give the
// same bits for every non-NaN value).
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
template <typename S> __device__ __forceinline__ S from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

// V elements of type S loaded and stored at once (V = 1: one element); kVec16<S> of them make
// 16 bytes, the widest load; aligned16 says whether a pointer allows it.
template <typename S, int V>
struct alignas(sizeof(S) * V) Vec {
  S v[V];
};
template <typename S>
constexpr int kVec16 = int(16 / sizeof(S));
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Calls f(std::integral_constant<Elem, t>{}) for the runtime t: kernels are templates over the
// Elem, launched as  with_elem(t, [&](auto T) { kernel<T.value><<<...>>>(...); });
template <typename F>
void with_elem(Elem t, F&& f) {
  switch (t) {
    case Elem::F32: return f(std::integral_constant<Elem, Elem::F32>{});
    case Elem::BF16: return f(std::integral_constant<Elem, Elem::BF16>{});
    case Elem::F16: return f(std::integral_constant<Elem, Elem::F16>{});
  }
  FAIL("unknown element type ", int(t));
}

}  // namespace mpicnn::gpu
