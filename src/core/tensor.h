// Shape and Tensor: arrays with a logical NCHW shape, owned by (or viewing memory of) one
// device, stored as `real` in that order (plain) unless a Format says otherwise (core/format.h:
// the GPU's channels-last 16-bit activations). Not an autograd tensor and not a lazy expression: layers compute into tensors
// that were planned and allocated before the training step. Copies between devices are
// explicit calls; nothing here moves data behind the caller's back.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "core/check.h"
#include "core/format.h"
#include "core/real.h"

namespace mpicnn {

enum class Device { CPU, CUDA };
const char* device_name(Device d);

// The device Tensor::empty/zeros use when not told: CPU, except inside a DeviceScope. Models
// plan their buffers inside one (Model::plan), so layers allocate on the model's device
// without every plan() taking a device argument. Per thread.
Device default_device();
class DeviceScope {
 public:
  explicit DeviceScope(Device d);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  Device saved_;
};

// Up to kMaxDims extents; shape checks are always on.
struct Shape {
  static constexpr int kMaxDims = 6;
  int ndim = 0;
  int64_t d[kMaxDims] = {};

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  int64_t operator[](int i) const;
  int64_t numel() const;
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const;  // "(2, 3, 4)"
};

class Tensor {
 public:
  Tensor() = default;  // empty: no data, ndim 0, numel 0

  // Owning. CUDA memory comes from the GPU backend (gpu::backend(): an error without one).
  static Tensor empty(const Shape& shape, Device device = default_device(),
                      Format format = {});  // uninitialised
  // zeros: on the CPU, large ones commit no memory until written (alloc_host_zeroed).
  static Tensor zeros(const Shape& shape, Device device = default_device());
  // Non-owning view of memory someone else keeps alive (a slab, a workspace).
  static Tensor view(real* data, const Shape& shape, Device device = Device::CPU);

  bool defined() const { return shape_.ndim > 0; }
  // The elements as `real`: an error for a 16-bit tensor. A plain tensor's are in NCHW order;
  // code that also takes other formats reads format() and uses raw().
  real* data() {
    if (format_.elem != Elem::F32) [[unlikely]] fail_not_real();
    return reinterpret_cast<real*>(data_);
  }
  const real* data() const {
    if (format_.elem != Elem::F32) [[unlikely]] fail_not_real();
    return reinterpret_cast<const real*>(data_);
  }
  void* raw() { return data_; }
  const void* raw() const { return data_; }
  Format format() const { return format_; }
  size_t bytes() const { return size_t(numel()) * elem_bytes(format_.elem); }
  const Shape& shape() const { return shape_; }
  int dim() const { return shape_.ndim; }
  int64_t size(int i) const { return shape_[i]; }
  int64_t numel() const { return shape_.numel(); }
  Device device() const { return device_; }

  // Same memory, different shape of equal numel. An NHWC tensor reshapes only to shapes whose
  // element order is the same in both layouts (its planes 1x1, or its channels 1), and is then
  // NCHW.
  Tensor reshape(const Shape& shape) const;
  // The first bytes of this tensor's memory as a tensor of `shape` in `format` (an untyped
  // buffer shared by tensors of several formats); they must fit.
  Tensor reinterpret(const Shape& shape, Format format) const;
  // The first shape.numel() elements as a view of that shape, on this tensor's device (a
  // planned buffer holding a smaller batch's activation).
  Tensor head(const Shape& shape) const;
  // Elements [offset, offset + shape.numel()) as a view of that shape, on this tensor's device.
  Tensor view_at(int64_t offset, const Shape& shape) const;
  // Rows [begin, end) of dimension 0, as a view (batch slicing).
  Tensor slice0(int64_t begin, int64_t end) const;

  // CPU-only element helpers for tests and setup code (not for hot loops).
  real& operator[](int64_t i);
  real operator[](int64_t i) const;
  void fill(real v);  // either device (on the GPU: queued on the backend's stream)
  // Same numel and format, any two devices. CPU<->CUDA is the one explicit transfer (it waits
  // for the copy); CUDA->CUDA is queued on the backend's stream.
  void copy_from(const Tensor& src);

 private:
  [[noreturn]] void fail_not_real() const;

  std::shared_ptr<void> storage_;  // null for views
  std::byte* data_ = nullptr;
  Format format_;
  Shape shape_;
  Device device_ = Device::CPU;
};

// `t` itself when it is on the CPU, else a CPU copy of it (for writing files, MPI, checks), in
// t's format.
Tensor to_host(const Tensor& t);
// A plain CPU copy of t, whatever its format and device (tests, checks): 16-bit elements
// widened exactly, NHWC reordered.
Tensor to_plain_host(const Tensor& t);

// A CPU tensor's elements in another format (a new CPU tensor): 16-bit types rounded to
// nearest even from real and widened exactly back; NHWC <-> NCHW reordered (4-D only).
Tensor convert_host(const Tensor& src, Format format);

// Whether two tensors share any memory (for layers that must not work in place).
bool overlaps(const Tensor& a, const Tensor& b);

// Aligned host allocation used by tensors and slabs (64-byte aligned for AVX-512).
std::shared_ptr<void> alloc_host(size_t bytes);
// Zero-filled; from kLazyZeroBytes up, fresh pages (mmap) that commit no memory until written,
// so a slab never written (inference's gradients) costs nothing.
std::shared_ptr<void> alloc_host_zeroed(size_t bytes);
inline constexpr size_t kLazyZeroBytes = size_t(1) << 20;
// Number of alloc_host and alloc_host_zeroed calls so far (tests use it to prove a training step allocates nothing).
int64_t host_allocation_count();

}  // namespace mpicnn

// CHECK_SHAPE(t, {N, C, H, W}): the tensor has exactly this shape.
#define CHECK_SHAPE(t, ...)                                                                    \
  do {                                                                                         \
    const ::mpicnn::Shape want_shape_ = ::mpicnn::Shape(__VA_ARGS__);                          \
    MPICNN_CHECK((t).shape() == want_shape_, #t " has shape ", (t).shape().str(), ", expected ",      \
          want_shape_.str());                                                                  \
  } while (0)
