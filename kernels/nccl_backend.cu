// NCCL's side of --gpu-allreduce nccl (src/dist/nccl_backend.h): one communicator per process on
// the selected GPU, a communication stream of its own, a ready and a done event per bucket slot,
// and the 16-bit casts around the allreduce when compressing. Built only when `make CUDA=1`
// finds nccl.h (MPICNN_HAVE_NCCL); src/dist/nccl_absent.cpp otherwise. The bookkeeping of which
// slot is queued when is src/dist/device_sync.cpp's, tested on the CPU with a stand-in.
#ifndef MPICNN_HAVE_NCCL
#error "kernels/nccl_backend.cu is built only when the Makefile finds nccl.h (MPICNN_HAVE_NCCL)"
#endif
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <nccl.h>

#include <cstring>

#include "common.cuh"
#include "dist/nccl_backend.h"

namespace mpicnn::dist::nccl {

namespace {

std::string describe(ncclResult_t r, ncclComm_t comm) {
  std::string s = std::string("NCCL: ") + ncclGetErrorString(r);
  const char* last = comm ? ncclGetLastError(comm) : ncclGetLastError(nullptr);
  if (last && *last) s += std::string(" (") + last + ")";
  return s;
}

}  // namespace

// NCCL_CHECK(call, comm): throws mpicnn::Error with NCCL's error string and its last message.
#define NCCL_CHECK(expr, comm)                                                     \
  do {                                                                             \
    const ncclResult_t nccl_rc_ = (expr);                                          \
    if (nccl_rc_ != ncclSuccess)                                                   \
      throw ::mpicnn::Error(describe(nccl_rc_, comm), #expr, __FILE__, __LINE__); \
  } while (0)

namespace {

// The 16-bit wire format and back, round to nearest even (as dist/compress.h's CPU casts).
template <class T>
__global__ void narrow_kernel(T* out, const float* in, int64_t n) {
  for (int64_t i = gpu::global_index(); i < n; i += gpu::grid_stride()) out[i] = T(in[i]);
}
template <class T>
__global__ void widen_kernel(float* out, const T* in, int64_t n) {
  for (int64_t i = gpu::global_index(); i < n; i += gpu::grid_stride()) out[i] = float(in[i]);
}

class NcclCollective final : public DeviceCollective {
 public:
  NcclCollective(const ncclUniqueId& id, int rank, int size, GradCompression compression, int64_t slab_floats)
      : compression_(compression) {
    gpu::ctx();  // a device is selected (throws otherwise)
    // The collective first: what may fail on one rank alone (memory) comes after every rank has
    // joined, so that the caller's agreement (Comm::on_all) reaches all of them.
    NCCL_CHECK(ncclCommInitRank(&comm_, size, id, rank), nullptr);
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    if (compression_ != GradCompression::None)
      wire_ = gpu::backend().alloc(size_t(slab_floats) * sizeof(uint16_t));
  }
  ~NcclCollective() override {
    // No throwing here: a failed step already reported its error.
    if (comm_) {
      cudaStreamSynchronize(stream_);
      ncclCommDestroy(comm_);
    }
    for (cudaEvent_t e : ready_) cudaEventDestroy(e);
    for (cudaEvent_t e : done_) cudaEventDestroy(e);
    cudaStreamDestroy(stream_);
  }

  void mark_ready(int slot) override { CUDA_CHECK(cudaEventRecord(event(ready_, slot), gpu::ctx().stream)); }

  void allreduce(int slot, float* slab, int64_t begin, int64_t end) override {
    CHECK(comm_, "NCCL: the communicator was aborted");
    CUDA_CHECK(cudaStreamWaitEvent(stream_, event(ready_, slot), 0));
    const int64_t n = end - begin;
    float* data = slab + begin;
    switch (compression_) {
      case GradCompression::None:
        NCCL_CHECK(ncclAllReduce(data, data, size_t(n), ncclFloat32, ncclSum, comm_, stream_), comm_);
        break;
      case GradCompression::Fp16: reduce16<__half>(data, begin, n, ncclFloat16); break;
      case GradCompression::Bf16: reduce16<__nv_bfloat16>(data, begin, n, ncclBfloat16); break;
    }
    CUDA_CHECK(cudaEventRecord(event(done_, slot), stream_));
  }

  void join(int slot) override { CUDA_CHECK(cudaStreamWaitEvent(gpu::ctx().stream, event(done_, slot), 0)); }

  bool done(int slot) override {
    CHECK(comm_, "NCCL: the communicator was aborted");
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm_, &async), comm_);
    if (async != ncclSuccess) throw Error(describe(async, comm_), "ncclCommGetAsyncError", __FILE__, __LINE__);
    const cudaError_t e = cudaEventQuery(event(done_, slot));
    if (e == cudaErrorNotReady) return false;
    CUDA_CHECK(e);
    return true;
  }

  void abort() override {
    if (!comm_) return;
    ncclCommAbort(comm_);  // ends the kernels stuck on a stalled peer; its status is moot now
    comm_ = nullptr;
  }

 private:
  // Slot events, made at the first step that uses the slot (as the backend's slot events).
  static cudaEvent_t event(std::vector<cudaEvent_t>& events, int slot) {
    CHECK(slot >= 0, "NCCL: bucket slot ", slot);
    while (int(events.size()) <= slot) {
      cudaEvent_t e;
      CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      events.push_back(e);
    }
    return events[size_t(slot)];
  }

  // The bucket cast to T in the wire copy (at the bucket's offset), summed there, cast back.
  template <class T>
  void reduce16(float* data, int64_t begin, int64_t n, ncclDataType_t type) {
    T* wire = static_cast<T*>(wire_.get()) + begin;
    narrow_kernel<T><<<gpu::blocks_for(n), gpu::kThreads, 0, stream_>>>(wire, data, n);
    KERNEL_CHECK();
    NCCL_CHECK(ncclAllReduce(wire, wire, size_t(n), type, ncclSum, comm_, stream_), comm_);
    widen_kernel<T><<<gpu::blocks_for(n), gpu::kThreads, 0, stream_>>>(data, wire, n);
    KERNEL_CHECK();
  }

  GradCompression compression_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<void> wire_;  // (slab_floats) 16-bit copies, when compressing
  std::vector<cudaEvent_t> ready_, done_;
};

}  // namespace

bool compiled_in() { return true; }
std::string unavailable_reason() { return ""; }

std::vector<uint8_t> unique_id() {
  ncclUniqueId id;
  NCCL_CHECK(ncclGetUniqueId(&id), nullptr);
  std::vector<uint8_t> bytes(sizeof id);
  std::memcpy(bytes.data(), &id, sizeof id);
  return bytes;
}

std::unique_ptr<DeviceCollective> open(const std::vector<uint8_t>& id, int rank, int size,
                                       GradCompression compression, int64_t slab_floats) {
  ncclUniqueId uid;
  CHECK(id.size() == sizeof uid, "NCCL: a communicator id of ", id.size(), " bytes, expected ", sizeof uid);
  std::memcpy(&uid, id.data(), sizeof uid);
  return std::make_unique<NcclCollective>(uid, rank, size, compression, slab_floats);
}

}  // namespace mpicnn::dist::nccl
