// The CUDA backend's core: device selection, the process's stream and library handles,
// device and pinned memory, and copies. The kernels live in the other
// kernels/*.cu files (one per layer, listed in src/core/gpu.h); this file also defines
// backend_instance(), which is what links a binary to the GPU (a CPU-only build links
// src/core/gpu_absent.cpp instead).
#include <cstdio>

#include "common.cuh"

namespace mpicnn::gpu {

namespace {
CudaBackend* g_backend = nullptr;
}

// Never destroyed: at exit, static destructors may run after CUDA's own teardown, and
// destroying cuDNN/cuBLAS handles then can crash a finished run (PyTorch leaks its handles
// for the same reason). The process's exit releases the device.
Backend* backend_instance() {
  static CudaBackend* const instance = new CudaBackend;
  g_backend = instance;
  return instance;
}

bool compiled_in() { return true; }

std::string unavailable_reason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return std::string("no usable CUDA device (cudaGetDeviceCount: ") + cudaGetErrorString(err) + ")";
  }
  if (count == 0) return "no CUDA device visible (cudaGetDeviceCount found 0)";
  return "";
}

Context& ctx() {
  CHECK(g_backend && g_backend->ctx_.stream, "CUDA backend used before select_device()");
  return g_backend->ctx_;
}

void* ensure_workspace(size_t bytes) {
  Context& c = ctx();
  if (bytes > c.workspace_bytes) {
    CUDA_CHECK(cudaStreamSynchronize(c.stream));  // the old one may still be in use
    c.workspace_owner = g_backend->alloc(bytes);
    c.workspace = c.workspace_owner.get();
    c.workspace_bytes = bytes;
  }
  return c.workspace;
}

CudaBackend::CudaBackend() = default;

int CudaBackend::device_count() const {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

void CudaBackend::select_device(int local_rank) {
  CHECK(!ctx_.stream, "select_device: a device is already selected (device ", ctx_.device, ")");
  const std::string why = unavailable_reason();
  CHECK(why.empty(), "--device cuda: ", why);
  const int count = device_count();
  ctx_.device = local_rank % count;
  CUDA_CHECK(cudaSetDevice(ctx_.device));
  CUDA_CHECK(cudaDeviceGetAttribute(&ctx_.sm_count, cudaDevAttrMultiProcessorCount, ctx_.device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&ctx_.stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&ctx_.copy_stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&compute_mark_, cudaEventDisableTiming));
  CUDNN_CHECK(cudnnCreate(&ctx_.cudnn));
  CUDNN_CHECK(cudnnSetStream(ctx_.cudnn, ctx_.stream));
  CUBLAS_CHECK(cublasCreate(&ctx_.cublas));
  CUBLAS_CHECK(cublasSetStream(ctx_.cublas, ctx_.stream));
  // TF32 only where gemm() asks for it through its compute type.
  CUBLAS_CHECK(cublasSetMathMode(ctx_.cublas, CUBLAS_DEFAULT_MATH));
  CUDA_CHECK(cudaMalloc(&ctx_.scratch, Context::kScratchBytes));
  ++allocations_;
}

int CudaBackend::device() const { return ctx_.device; }

std::string CudaBackend::device_name() const {
  if (ctx_.device < 0) return "no device selected";
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, ctx_.device));
  return std::string(p.name) + " (device " + std::to_string(ctx_.device) + ", sm_" +
         std::to_string(p.major) + std::to_string(p.minor) + ")";
}

std::string CudaBackend::device_uuid() const {
  CHECK(ctx_.device >= 0, "device_uuid: no device selected");
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, ctx_.device));
  // nvidia-smi's form: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
  std::string s = "GPU-";
  char hex[3];
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    std::snprintf(hex, sizeof hex, "%02x", unsigned(uint8_t(p.uuid.bytes[i])));
    s += hex;
  }
  return s;
}

void CudaBackend::synchronize() {
  CUDA_CHECK(cudaStreamSynchronize(ctx().stream));
  CUDA_CHECK(cudaGetLastError());
}

int64_t CudaBackend::allocation_count() const { return allocations_; }

std::shared_ptr<void> CudaBackend::alloc(size_t bytes) {
  ctx();  // a device must be selected: memory belongs to it
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    FAIL("out of GPU memory: ", bytes >> 20, " MiB more wanted, ", free_b >> 20, " of ",
         total_b >> 20, " MiB free on ", device_name(), " (lower -b/--batch-size)");
  }
  CUDA_CHECK(err);
  ++allocations_;
  return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
}

std::shared_ptr<void> CudaBackend::alloc_pinned(size_t bytes) {
  ctx();
  void* p = nullptr;
  CUDA_CHECK(cudaMallocHost(&p, bytes ? bytes : 1));
  ++allocations_;
  return std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
}

void CudaBackend::copy(void* dst, bool dst_device, const void* src, bool src_device, size_t bytes) {
  copy_async(dst, dst_device, src, src_device, bytes);
  if (bytes) CUDA_CHECK(cudaStreamSynchronize(ctx().stream));
}

void CudaBackend::copy_async(void* dst, bool dst_device, const void* src, bool src_device,
                             size_t bytes) {
  Context& c = ctx();
  if (bytes == 0) return;
  const cudaMemcpyKind kind = dst_device ? (src_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                         : (src_device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, c.stream));
}

struct Event {
  cudaEvent_t e = nullptr;
  bool recorded = false;
  ~Event() { cudaEventDestroy(e); }
};

std::shared_ptr<Event> CudaBackend::event() {
  ctx();
  auto ev = std::make_shared<Event>();
  CUDA_CHECK(cudaEventCreateWithFlags(&ev->e, cudaEventDisableTiming));
  return ev;
}

std::shared_ptr<Event> CudaBackend::timing_event() {
  ctx();
  auto ev = std::make_shared<Event>();
  CUDA_CHECK(cudaEventCreate(&ev->e));
  return ev;
}

float CudaBackend::elapsed_ms(Event& start, Event& end) {
  CHECK(start.recorded && end.recorded, "elapsed_ms: an event was never recorded");
  CUDA_CHECK(cudaEventSynchronize(end.e));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start.e, end.e));
  return ms;
}

void CudaBackend::record(Event& e) {
  CUDA_CHECK(cudaEventRecord(e.e, ctx().stream));
  e.recorded = true;
}

void CudaBackend::wait(Event& e) {
  if (!e.recorded) return;
  CUDA_CHECK(cudaEventSynchronize(e.e));
  CUDA_CHECK(cudaGetLastError());
}

void CudaBackend::copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                            size_t width, size_t rows) {
  if (width == 0 || rows == 0) return;
  // Contiguous: one plain copy (cudaMemcpy2D refuses pitches over cudaDevAttrMaxPitch, about
  // 2 GiB, which a whole large activation reaches).
  if (rows == 1 || (dst_pitch == width && src_pitch == width)) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, width * rows, cudaMemcpyDeviceToDevice, ctx().stream));
    return;
  }
  CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows,
                               cudaMemcpyDeviceToDevice, ctx().stream));
}

cudaEvent_t CudaBackend::slot_event(int slot) {
  CHECK(slot >= 0, "gradient sync slot ", slot);
  while (int(slot_events_.size()) <= slot) {  // once per slot, at the first step
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    slot_events_.push_back(e);
  }
  return slot_events_[size_t(slot)];
}

void CudaBackend::copy_to_host_async(void* host, const float* dev, size_t bytes, int slot) {
  Context& c = ctx();
  cudaEvent_t done = slot_event(slot);
  // The copy stream waits for the gradients queued so far, then copies while backward goes on.
  CUDA_CHECK(cudaEventRecord(compute_mark_, c.stream));
  CUDA_CHECK(cudaStreamWaitEvent(c.copy_stream, compute_mark_, 0));
  CUDA_CHECK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, c.copy_stream));
  CUDA_CHECK(cudaEventRecord(done, c.copy_stream));
}

void CudaBackend::mark_ready(int slot) {
  CUDA_CHECK(cudaEventRecord(slot_event(slot), ctx().stream));
}

bool CudaBackend::slot_done(int slot, bool wait) {
  CHECK(slot >= 0 && slot < int(slot_events_.size()), "slot_done: unknown slot ", slot);
  cudaEvent_t e = slot_events_[size_t(slot)];
  if (wait) {
    CUDA_CHECK(cudaEventSynchronize(e));
    return true;
  }
  const cudaError_t err = cudaEventQuery(e);
  if (err == cudaErrorNotReady) return false;
  CUDA_CHECK(err);
  return true;
}

}  // namespace mpicnn::gpu
