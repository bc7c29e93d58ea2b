// Threaded batch loader: claim/fill/deliver over a ring of preallocated batch slots.
// Not a scheduler of anything else: one loader owns its threads and nothing global.
//
// How it stays deterministic: a sample's output depends only on (order, epoch, SampleFn) and
// the row it goes to depends only on its position in the order; workers only decide *when*
// a row is written. Positions are claimed in order (in chunks within one batch), so when a
// sample fails, every earlier position has been claimed and will finish: the consumer gets
// exactly the batches before the failing one, then the error, whatever the worker count.
#include "data/loader.h"

#include <algorithm>

#include "core/check.h"
#include "core/rng.h"
#include "core/timer.h"

namespace mpicnn::data {

void image_to_chw(float* out, const Image& img, int channels, int height, int width) {
  CHECK(img.height == height && img.width == width && img.channels == channels, "image is ", img.height, "x",
        img.width, "x", img.channels, " (HxWxC) but the loader's sample shape is (", channels, ", ", height, ", ",
        width, "); give the loader a transform");
  const size_t plane = size_t(height) * width;
  const uint8_t* px = img.pixels.data();
  for (int c = 0; c < channels; ++c)
    // A division, not a multiply by 1/255: the same floats as torchvision's ToTensor.
    for (size_t i = 0; i < plane; ++i) out[c * plane + i] = float(px[i * channels + c]) / 255.0f;
}

Loader::Loader(const Dataset& ds, const Shape& sample_shape, SampleFn fn, const LoaderOptions& opt)
    : Loader(ds, sample_shape, std::move(fn), ByteSamples{}, opt) {}

namespace {
ByteSamples required(ByteSamples b) {
  CHECK(b.fn != nullptr, "loader: ByteSamples holds no function");
  return b;
}
}  // namespace

Loader::Loader(const Dataset& ds, const Shape& sample_shape, ByteSamples fn, const LoaderOptions& opt)
    : Loader(ds, sample_shape, nullptr, required(std::move(fn)), opt) {}

Loader::Loader(const Dataset& ds, const Shape& sample_shape, SampleFn fn, ByteSamples byte_samples,
               const LoaderOptions& opt)
    : ds_(ds), fn_(std::move(fn)), byte_fn_(std::move(byte_samples.fn)), opt_(opt) {
  CHECK(sample_shape.ndim == 3 && sample_shape[0] > 0 && sample_shape[1] > 0 && sample_shape[2] > 0,
        "loader: sample shape must be (C, H, W), got ", sample_shape.str());
  CHECK(opt.batch_size > 0, "loader: batch size must be positive, got ", opt.batch_size);
  CHECK(opt.workers >= 0 && opt.workers <= 256, "loader: workers must be in [0, 256], got ", opt.workers);
  CHECK(opt.prefetch >= 0, "loader: prefetch must be >= 0 (0: the default), got ", opt.prefetch);
  C_ = int(sample_shape[0]);
  H_ = int(sample_shape[1]);
  W_ = int(sample_shape[2]);
  if (opt_.channels == 0 && (C_ == 1 || C_ == 3)) opt_.channels = C_;
  if (!fn_ && !byte_fn_) fn_ = [c = C_, h = H_, w = W_](float* out, const Image& img, uint64_t, uint64_t) {
    image_to_chw(out, img, c, h, w);
  };
  prefetch_ = opt.prefetch > 0 ? opt.prefetch : std::max(2, 2 * opt.workers);
  const int B = opt.batch_size;
  // Small chunks spread one batch over the workers (a batch is ready sooner than if one
  // worker did all of it); more than one sample per claim keeps the lock out of the way.
  chunk_ = opt.workers > 0 ? std::clamp(B / (2 * opt.workers), 1, 16) : B;
  // All buffers now: no tensor is allocated per batch or per epoch.
  slots_.resize(opt.workers > 0 ? size_t(prefetch_) + 1 : 1);
  const size_t per = size_t(C_) * H_ * W_;
  for (Slot& s : slots_) {
    if (byte_fn_) {
      const size_t bytes = size_t(B) * per;
      s.pixel_memory = byte_samples.alloc ? byte_samples.alloc(bytes)
                                          : std::shared_ptr<void>(new uint8_t[bytes](), std::default_delete<uint8_t[]>());
      CHECK(s.pixel_memory != nullptr, "loader: no memory for ", bytes, " bytes of 8-bit samples");
      s.pixels = static_cast<uint8_t*>(s.pixel_memory.get());
      s.flips.assign(size_t(B), 0);
    } else {
      s.images = Tensor::empty(Shape{B, C_, H_, W_});
    }
    s.labels.resize(size_t(B));
    s.indices.resize(size_t(B));
  }
  threads_.reserve(size_t(opt.workers));
  for (int t = 0; t < opt.workers; ++t) threads_.emplace_back([this] { worker_loop(); });
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    stop_flag_ = true;
  }
  cv_work_.notify_all();
  for (std::thread& t : threads_) t.join();
}

size_t Loader::batches_in_epoch() const {
  std::lock_guard<std::mutex> lk(mu_);
  return batches_;
}

bool Loader::slot_complete(uint64_t b) const {
  const Slot& s = slots_[b % slots_.size()];
  return s.batch == b && s.done == s.size;
}

int Loader::ready() const {
  std::lock_guard<std::mutex> lk(mu_);
  int n = 0;
  for (uint64_t b = consumed_; b < consumed_ + uint64_t(prefetch_) && b < batches_; ++b) n += slot_complete(b);
  return n;
}

LoaderStats Loader::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void Loader::reset_stats() {
  std::lock_guard<std::mutex> lk(mu_);
  stats_ = LoaderStats{};
}

std::vector<BadSample> Loader::bad_samples() const {
  std::lock_guard<std::mutex> lk(bad_mu_);
  std::vector<BadSample> out = bad_;
  std::sort(out.begin(), out.end(), [](const BadSample& a, const BadSample& b) { return a.index < b.index; });
  return out;
}

void Loader::start_epoch(uint64_t epoch, std::vector<uint64_t> order) {
  const size_t n = ds_.size();
  for (const uint64_t i : order) CHECK(i < n, "loader: the epoch order holds index ", i, " but the dataset has ", n, " samples");
  std::unique_lock<std::mutex> lk(mu_);
  // Discard the epoch in flight: no more claims, and wait until no worker is still writing
  // into the ring (a worker drops its unit at the next sample once it sees the new gen).
  ++gen_;
  gen_flag_ = gen_;
  active_ = false;
  cv_ready_.wait(lk, [&] { return in_flight_ == 0; });
  order_ = std::move(order);
  epoch_ = epoch;
  const uint64_t B = uint64_t(opt_.batch_size);
  batches_ = (order_.size() + B - 1) / B;
  claim_ = consumed_ = 0;
  err_ = nullptr;
  err_pos_ = std::numeric_limits<uint64_t>::max();
  failed_ = false;
  stats_ = LoaderStats{};
  for (Slot& s : slots_) s.batch = std::numeric_limits<uint64_t>::max();
  active_ = true;
  lk.unlock();
  cv_work_.notify_all();
}

bool Loader::claim(Unit& u, bool bounded) {
  if (!active_ || err_ || claim_ >= order_.size()) return false;
  const uint64_t B = uint64_t(opt_.batch_size), b = claim_ / B;
  // The queue bound: batch b needs a free slot, and at most prefetch batches run ahead of
  // the consumer (its held batch is consumed_ - 1).
  if (bounded && b >= consumed_ + uint64_t(prefetch_)) return false;
  Slot& s = slot_of(b);
  if (claim_ == b * B) {  // first claim in batch b: the slot's previous batch was released
    s.batch = b;
    s.size = int(std::min<uint64_t>(B, order_.size() - b * B));
    s.done = 0;
  }
  u.begin = claim_;
  u.end = std::min<uint64_t>({claim_ + uint64_t(chunk_), (b + 1) * B, order_.size()});
  u.gen = gen_;
  claim_ = u.end;
  ++in_flight_;
  return true;
}

bool Loader::try_load(uint64_t index, Slot& s, size_t row, std::exception_ptr* err) {
  std::string msg;
  try {
    const Image img = ds_.load(index, opt_.channels);
    const size_t per = size_t(C_) * H_ * W_;
    if (byte_fn_)
      s.flips[row] = byte_fn_(s.pixels + row * per, img, epoch_, ds_.id(index));
    else
      fn_(s.images.data() + row * per, img, epoch_, ds_.id(index));
    return true;
  } catch (const Error& e) {
    msg = e.message();
  } catch (const std::exception& e) {
    msg = e.what();
  } catch (...) {
    msg = "unknown exception";
  }
  // Whatever failed (read, decode, transform), the message names the sample.
  const std::string source = ds_.source(index);
  if (msg.find(source) == std::string::npos) msg = source + ": " + msg;
  {
    std::lock_guard<std::mutex> lk(bad_mu_);
    if (bad_index_.insert(index).second) bad_.push_back({index, source, msg});
  }
  if (err) *err = std::make_exception_ptr(Error(msg, nullptr, __FILE__, __LINE__));
  return false;
}

bool Loader::load_position(uint64_t p, const Unit& u, bool& replaced, std::exception_ptr& err) {
  const uint64_t B = uint64_t(opt_.batch_size);
  Slot& s = slot_of(p / B);
  const size_t row = size_t(p % B);
  auto put = [&](uint64_t index) {
    s.labels[row] = ds_.label(index);
    s.indices[row] = index;
  };
  const uint64_t index = order_[p];
  if (try_load(index, s, row, opt_.skip_bad ? nullptr : &err)) {
    put(index);
    return true;
  }
  if (!opt_.skip_bad) return false;
  // Deterministic replacement: the next sample in the epoch order that loads, wrapping.
  replaced = true;
  const uint64_t n = order_.size();
  for (uint64_t k = 1; k < n; ++k) {
    if (abandoned(u)) return false;
    const uint64_t q = order_[(p + k) % n];
    if (try_load(q, s, row, nullptr)) {
      put(q);
      return true;
    }
  }
  err = std::make_exception_ptr(Error(detail::concat("loader: every one of the ", n, " samples of epoch ", epoch_,
                                                     " failed to load; the first: ", ds_.source(index)),
                                      nullptr, __FILE__, __LINE__));
  return false;
}

void Loader::run_unit(const Unit& u) {
  Timer t;
  int ok = 0;
  uint64_t skipped = 0, err_pos = std::numeric_limits<uint64_t>::max();
  std::exception_ptr err;
  for (uint64_t p = u.begin; p < u.end; ++p) {
    if (abandoned(u)) break;
    bool replaced = false;
    std::exception_ptr e;
    bool loaded = false;
    try {  // nothing may escape a worker thread (that would terminate the program)
      loaded = load_position(p, u, replaced, e);
    } catch (...) {
      e = std::current_exception();
    }
    if (!loaded) {
      if (e) err_pos = p, err = std::move(e);
      break;
    }
    ++ok;
    skipped += replaced;
  }
  const double secs = t.seconds();
  std::lock_guard<std::mutex> lk(mu_);
  // Moved in, so the worker's last reference to the error goes away under the lock: the
  // consumer may rethrow and discard it as soon as the lock is released.
  finish_unit(u, ok, skipped, secs, err_pos, std::move(err));
}

void Loader::finish_unit(const Unit& u, int ok, uint64_t skipped, double secs, uint64_t err_pos,
                         std::exception_ptr err) {
  --in_flight_;
  if (u.gen == gen_) {
    slot_of(u.begin / uint64_t(opt_.batch_size)).done += ok;
    stats_.samples += uint64_t(ok);
    stats_.worker_seconds += secs;
    stats_.skipped += skipped;
    // The earliest failing position wins, so the error reported does not depend on timing.
    if (err && err_pos < err_pos_) err_pos_ = err_pos, err_ = std::move(err);
  }
  cv_ready_.notify_all();
}

void Loader::worker_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    Unit u;
    cv_work_.wait(lk, [&] { return stop_ || claim(u, true); });
    if (stop_) return;
    lk.unlock();
    run_unit(u);  // relocks to finish
    lk.lock();
  }
}

bool Loader::next(Batch& out) {
  std::unique_lock<std::mutex> lk(mu_);
  if (failed_) std::rethrow_exception(err_);
  if (!active_ || consumed_ >= batches_) return false;
  const uint64_t c = consumed_;
  Timer t;
  if (threads_.empty()) {
    Unit u;
    while (!slot_complete(c) && !err_ && claim(u, false)) {
      lk.unlock();
      run_unit(u);
      lk.lock();
    }
  } else {
    // Once a sample failed no more work is claimed; wait for what is running, so that the
    // earliest failure is known before deciding whether batch c is complete.
    cv_ready_.wait(lk, [&] { return slot_complete(c) || (err_ && in_flight_ == 0); });
  }
  stats_.wait_seconds += t.seconds();
  if (!slot_complete(c)) {
    CHECK(err_ != nullptr, "loader: batch ", c, " is incomplete without an error (internal error)");
    failed_ = true;
    std::rethrow_exception(err_);
  }
  const Slot& s = slot_of(c);
  if (byte_fn_) {
    out.images = Tensor();
    out.pixels = s.pixels;
    out.flips.assign(s.flips.begin(), s.flips.begin() + s.size);
  } else {
    out.images = s.images.slice0(0, s.size);
    out.pixels = nullptr;
    out.flips.clear();
  }
  out.labels.assign(s.labels.begin(), s.labels.begin() + s.size);
  out.indices.assign(s.indices.begin(), s.indices.begin() + s.size);
  out.size = s.size;
  out.number = c;
  ++consumed_;
  lk.unlock();
  cv_work_.notify_all();
  return true;
}

std::vector<uint64_t> shuffled_order(size_t n, uint64_t seed, uint64_t epoch) {
  std::vector<uint64_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i;
  const Rng rng(seed, stream_id("loader.shuffle.epoch" + std::to_string(epoch)));
  for (size_t i = n; i-- > 1;) std::swap(v[i], v[rng.below(i, i + 1)]);
  return v;
}

}  // namespace mpicnn::data
