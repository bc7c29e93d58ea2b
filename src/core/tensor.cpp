// Tensor storage and shape bookkeeping. CUDA memory and copies go through the GPU backend
// (core/gpu.h), which is absent from CPU-only builds.
#include "core/tensor.h"

#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/gpu.h"

namespace mpicnn {

const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

static thread_local Device g_default_device = Device::CPU;
Device default_device() { return g_default_device; }
DeviceScope::DeviceScope(Device d) : saved_(g_default_device) { g_default_device = d; }
DeviceScope::~DeviceScope() { g_default_device = saved_; }

Shape::Shape(std::initializer_list<int64_t> dims) {
  CHECK(dims.size() <= size_t(kMaxDims), "shape has ", dims.size(), " dims, at most ", kMaxDims);
  for (int64_t v : dims) {
    CHECK(v >= 0, "negative extent ", v, " in shape");
    d[ndim++] = v;
  }
}

int64_t Shape::operator[](int i) const {
  CHECK(i >= 0 && i < ndim, "dimension ", i, " out of range for shape ", str());
  return d[i];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= d[i];
  return ndim == 0 ? 0 : n;
}

bool Shape::operator==(const Shape& o) const {
  if (ndim != o.ndim) return false;
  for (int i = 0; i < ndim; ++i)
    if (d[i] != o.d[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "(";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + ")";
}

Tensor to_host(const Tensor& t) {
  if (t.device() == Device::CPU) return t;
  Tensor h = Tensor::empty(t.shape(), Device::CPU, t.format());
  h.copy_from(t);
  return h;
}

Tensor to_plain_host(const Tensor& t) { return convert_host(to_host(t), Format{}); }

bool overlaps(const Tensor& a, const Tensor& b) {
  const auto* pa = static_cast<const std::byte*>(a.raw());
  const auto* pb = static_cast<const std::byte*>(b.raw());
  return a.numel() > 0 && b.numel() > 0 && pa < pb + b.bytes() && pb < pa + a.bytes();
}

static std::atomic<int64_t> g_host_allocations{0};

int64_t host_allocation_count() { return g_host_allocations.load(); }

std::shared_ptr<void> alloc_host(size_t bytes) {
  g_host_allocations.fetch_add(1, std::memory_order_relaxed);
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded ? rounded : 64);
  CHECK(p != nullptr, "out of host memory allocating ", bytes, " bytes");
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

std::shared_ptr<void> alloc_host_zeroed(size_t bytes) {
  if (bytes < kLazyZeroBytes) {
    std::shared_ptr<void> p = alloc_host(bytes);
    std::memset(p.get(), 0, bytes);
    return p;
  }
  g_host_allocations.fetch_add(1, std::memory_order_relaxed);
  // Fresh anonymous pages read as zero and take no memory until written: the gradient slab of
  // a model that only runs inference, or an optimizer state that is never stepped, costs
  // nothing (PyTorch creates both lazily). Page-aligned, so 64-byte aligned.
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(p != MAP_FAILED, "out of host memory allocating ", bytes, " bytes: ", std::strerror(errno));
  // Transparent huge pages where the system allows them on request, as the allocator's
  // (GLIBC_TUNABLES=glibc.malloc.hugetlb=1) large blocks: fewer page faults on first touch.
  madvise(p, bytes, MADV_HUGEPAGE);
  return std::shared_ptr<void>(p, [bytes](void* q) { munmap(q, bytes); });
}

Tensor Tensor::empty(const Shape& shape, Device device, Format format) {
  Tensor t;
  const size_t bytes = size_t(shape.numel()) * elem_bytes(format.elem);
  t.storage_ = device == Device::CPU ? alloc_host(bytes) : gpu::backend().alloc(bytes);
  t.data_ = static_cast<std::byte*>(t.storage_.get());
  t.shape_ = shape;
  t.device_ = device;
  t.format_ = format;
  return t;
}

void Tensor::fail_not_real() const {
  FAIL("a ", format_name(format_), " tensor ", shape_.str(),
       " read as ", sizeof(real) == 4 ? "float32" : "float64",
       " (a layer without a path for this format; see --gpu-layout)");
}

Tensor Tensor::zeros(const Shape& shape, Device device) {
  if (device != Device::CPU) {
    Tensor t = empty(shape, device);
    t.fill(0.f);
    return t;
  }
  Tensor t;
  t.storage_ = alloc_host_zeroed(size_t(shape.numel()) * sizeof(real));
  t.data_ = static_cast<std::byte*>(t.storage_.get());
  t.shape_ = shape;
  t.device_ = device;
  return t;
}

Tensor Tensor::view(real* data, const Shape& shape, Device device) {
  CHECK(data != nullptr || shape.numel() == 0, "view of null memory with shape ", shape.str());
  Tensor t;
  t.data_ = reinterpret_cast<std::byte*>(data);
  t.shape_ = shape;
  t.device_ = device;
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  CHECK(shape.numel() == numel(), "cannot reshape ", shape_.str(), " to ", shape.str());
  Tensor t = *this;
  t.shape_ = shape;
  if (format_.order == Order::NHWC && shape != shape_) {
    CHECK(dim() == 4 && (size(2) * size(3) == 1 || size(1) == 1), "cannot reshape the ",
          format_name(format_), " tensor ", shape_.str(), " to ", shape.str(),
          ": its element order is not NCHW's");
    t.format_.order = Order::NCHW;  // the same order: 1x1 planes or one channel
  }
  return t;
}

Tensor Tensor::reinterpret(const Shape& shape, Format format) const {
  const size_t need = size_t(shape.numel()) * elem_bytes(format.elem);
  CHECK(need <= bytes(), "a ", format_name(format), " view of ", shape.str(), " (", need,
        " bytes) does not fit in ", bytes(), " bytes");
  Tensor t = *this;
  t.shape_ = shape;
  t.format_ = format;
  return t;
}

Tensor Tensor::head(const Shape& shape) const { return view_at(0, shape); }

Tensor Tensor::view_at(int64_t offset, const Shape& shape) const {
  CHECK(offset >= 0 && offset + shape.numel() <= numel(), "view of ", shape.str(), " at ", offset,
        " does not fit in ", shape_.str());
  Tensor t = *this;
  t.shape_ = shape;
  t.data_ = data_ + offset * int64_t(elem_bytes(format_.elem));
  return t;
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  CHECK(dim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "slice [", begin, ", ",
        end, ") out of range for shape ", shape_.str());
  Tensor t = *this;
  t.shape_.d[0] = end - begin;
  t.data_ = data_ + begin * (numel() / (shape_[0] ? shape_[0] : 1)) *
                        int64_t(elem_bytes(format_.elem));
  return t;
}

real& Tensor::operator[](int64_t i) {
  CHECK(device_ == Device::CPU && i >= 0 && i < numel(), "element ", i, " of ", shape_.str());
  return data()[i];
}

real Tensor::operator[](int64_t i) const {
  CHECK(device_ == Device::CPU && i >= 0 && i < numel(), "element ", i, " of ", shape_.str());
  return data()[i];
}

void Tensor::fill(real v) {
  if (device_ == Device::CUDA) return gpu::backend().fill(format_.elem, data_, float(v), numel());
  real* p = data();
  const int64_t n = numel();
  // A parameter slab's zero_grad is 100 MB for ResNet-50, which one thread alone wrote while
  // the others waited.
#pragma omp parallel for schedule(static) if (n >= (int64_t(1) << 20))
  for (int64_t i = 0; i < n; ++i) p[i] = v;
}

void Tensor::copy_from(const Tensor& src) {
  CHECK(src.numel() == numel(), "copy_from: ", src.shape_.str(), " into ", shape_.str());
  CHECK(src.format_ == format_ || numel() == 0, "copy_from: ", format_name(src.format_),
        " into ", format_name(format_), " (formats convert through convert_host or the GPU's "
        "convert, not a copy)");
  if (numel() == 0 || data_ == src.data_) return;
  if (device_ == Device::CPU && src.device_ == Device::CPU) {
    std::memmove(data_, src.data_, bytes());
  } else if (device_ == Device::CUDA && src.device_ == Device::CUDA) {
    CHECK(!overlaps(*this, src), "copy_from: overlapping CUDA tensors");
    gpu::backend().copy_rows(data_, bytes(), src.data_, bytes(), bytes(), 1);
  } else {
    gpu::backend().copy(data_, device_ == Device::CUDA, src.data_, src.device_ == Device::CUDA,
                        bytes());
  }
}

}  // namespace mpicnn
