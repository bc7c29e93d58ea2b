// Core: shapes and tensors, the counter-based RNG, the parameter slab store.
#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>

#include <set>
#include <thread>

#include "core/check.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "core/threads.h"
#include "layers/params.h"
#include "testing.h"

using namespace mpicnn;

TEST_CASE("Shape and Tensor basics") {
  Shape s{2, 3, 4, 5};
  CHECK(s.numel() == 120);
  CHECK(s.str() == "(2, 3, 4, 5)");
  CHECK_THROWS_AS(Shape({2, -1}), Error);
  Tensor t = Tensor::zeros(s);
  CHECK(reinterpret_cast<uintptr_t>(t.data()) % 64 == 0);
  t[7] = 3.f;
  Tensor r = t.reshape({6, 20});
  CHECK(r.data() == t.data());
  CHECK(r[7] == 3.f);
  CHECK_THROWS_AS(t.reshape({7, 20}), Error);
  Tensor b = t.slice0(1, 2);
  CHECK(b.shape() == Shape{1, 3, 4, 5});
  CHECK(b.data() == t.data() + 60);
  CHECK_THROWS_AS(t.slice0(1, 3), Error);
  CHECK_THROWS_AS(t[120], Error);
  CHECK_THROWS_AS(Tensor::empty(s, Device::CUDA), Error);
  CHECK(!Tensor().defined());
}

// This process's resident memory in MB (/proc/self/statm).
static double resident_mb() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  REQUIRE(f != nullptr);
  const int got = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  REQUIRE(got == 2);
  return double(resident) * double(sysconf(_SC_PAGESIZE)) / double(1 << 20);
}

// The size of a transparent huge page, or of a base page where the kernel has none: what one
// read of a fresh anonymous page may commit (a huge page when THP is "always", or "madvise" as
// alloc_host_zeroed asks, and the kernel maps a real page rather than its huge zero page).
static double fault_granule_mb() {
  long bytes = sysconf(_SC_PAGESIZE);
  if (FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", "r")) {
    long huge = 0;
    if (std::fscanf(f, "%ld", &huge) == 1 && huge > bytes) bytes = huge;
    std::fclose(f);
  }
  return double(bytes) / double(1 << 20);
}

TEST_CASE("Tensor::zeros: a large CPU tensor reads as zero and takes memory only once written") {
  // Inference never writes the gradient slab, an unstepped optimizer its state: neither may cost
  // memory (bench/compare_train.sh's inference rows count peak resident memory). What our code
  // controls: allocating writes nothing (no page is touched), so only the pages a reader
  // touches can become resident. How much one read commits is the kernel's choice: nothing
  // with the (huge) zero page, one page, or one huge page under THP (seen: 16 reads made 34 MB
  // resident on a kernel with THP "madvise" and the zero page on). So the bound is the
  // touched pages at the largest granule, whatever the THP settings.
  const int64_t n = int64_t(256) << 18;  // 256 MB of floats
  const double granule = fault_granule_mb(), slack = 4;  // slack: the test's own allocations
  const double before = resident_mb();
  Tensor t = Tensor::zeros({n});
  CHECK(reinterpret_cast<uintptr_t>(t.data()) % 64 == 0);
  const double allocated = resident_mb();
  CHECK_MESSAGE(allocated - before < slack, "allocating 256 MB of zeros made ",
                allocated - before, " MB resident");
  // Reads at 4 places, each at most one granule (2 MB huge pages: at most 8 of 256 MB).
  const int reads = 4;
  double sum = 0;
  for (int64_t k = 0; k < reads - 1; ++k) sum += std::fabs(double(t.data()[k * (n / reads) + k * 977 % 4096]));
  CHECK(sum == 0);
  CHECK(t.data()[n - 1] == 0.f);
  const double read = resident_mb();
  CHECK_MESSAGE(read - before < reads * granule + slack, "reading 256 MB of zeros at ", reads,
                " places made ", read - before, " MB resident (granule ", granule, " MB)");
  t.fill(1.f);
  const double written = resident_mb();
  CHECK_MESSAGE(written - before > 200, "writing 256 MB made only ", written - before, " MB resident");
  CHECK(t.data()[n - 1] == 1.f);
  // Small ones come from the allocator, zero-filled.
  Tensor s = Tensor::zeros({1000});
  CHECK(reinterpret_cast<uintptr_t>(s.data()) % 64 == 0);
  for (int64_t i = 0; i < s.numel(); ++i) REQUIRE(s.data()[i] == 0.f);
}

TEST_CASE("CHECK reports message, expression and place") {
  try {
    int x = 3;
    MPICNN_CHECK(x == 4, "x was ", x);
    FAIL("no throw");
  } catch (const Error& e) {
    CHECK(e.message() == "x was 3");
    std::string w = e.what();
    CHECK(w.find("x == 4") != std::string::npos);
    CHECK(w.find("test_core.cpp") != std::string::npos);
  }
}

TEST_CASE("Philox matches the published known-answer vectors") {
  // Random123 kat_vectors, philox4x32_10: counter (c0..c3), key (k0, k1) -> output.
  auto a = philox4x32(0, 0, 0);
  CHECK(a[0] == 0x6627e8d5u);
  CHECK(a[1] == 0xe169c58du);
  CHECK(a[2] == 0xbc57ac4cu);
  CHECK(a[3] == 0x9b00dbd8u);
  // counter = all ones, key = all ones
  auto b = philox4x32(~0ull, ~0ull, ~0ull);
  CHECK(b[0] == 0x408f276du);
  CHECK(b[1] == 0x41c83b0eu);
  CHECK(b[2] == 0xa20bc7c6u);
  CHECK(b[3] == 0x6d5451fdu);
  // counter (243f6a88 85a308d3 13198a2e 03707344), key (a4093822 299f31d0): digits of pi
  auto c = philox4x32(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull);
  CHECK(c[0] == 0xd16cfe09u);
  CHECK(c[1] == 0x94fdccebu);
  CHECK(c[2] == 0x5001e420u);
  CHECK(c[3] == 0x24126ea1u);
}

TEST_CASE("RNG draws depend only on (seed, stream, index), not on threads") {
  Rng rng(42, "layer1.0.conv1.weight");
  const int n = 100000;
  std::vector<float> serial(n), parallel(n);
  for (int i = 0; i < n; ++i) serial[size_t(i)] = rng.uniform(uint64_t(i));
#pragma omp parallel for num_threads(4) schedule(dynamic, 7)
  for (int i = n - 1; i >= 0; --i) parallel[size_t(i)] = rng.uniform(uint64_t(i));
  CHECK(serial == parallel);
  double mean = 0, m2 = 0;
  for (int i = 0; i < n; ++i) {
    float u = serial[size_t(i)];
    REQUIRE(u >= 0.f);
    REQUIRE(u < 1.f);
    mean += u;
    float z = rng.normal(uint64_t(i));
    m2 += double(z) * z;
  }
  CHECK(std::fabs(mean / n - 0.5) < 0.005);
  CHECK(std::fabs(m2 / n - 1.0) < 0.02);
  CHECK(Rng(42, 1).uniform(0) != Rng(43, 1).uniform(0));
  CHECK(Rng(42, 1).uniform(0) != Rng(42, 2).uniform(0));
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; ++i) seen.insert(rng.below(uint64_t(i), 10));
  CHECK(seen.size() == 10);
}

TEST_CASE("fill_uniform and fill_normal give every index's uniform(i, lo, hi) and mean + std * normal(i)") {
  // Their blocks of 64 draws side by side, chunks over threads: the values of the per-index
  // calls, for lengths around a block's and over several threads. The scales are powers of two,
  // so that a fused multiply-add (the library's -O3 may form one) rounds as the test's
  // separate multiply and add.
  const Rng rng(7, "features.0.weight");
  const int before = num_threads();
  for (int threads : {1, 3})
    for (int64_t n : {0, 1, 63, 64, 65, 1000, 100003}) {
      CAPTURE(threads);
      CAPTURE(n);
      set_num_threads(threads);
      const size_t len = static_cast<size_t>(n);
      std::vector<float> u(len), z(len);
      std::vector<double> z64(len);
      fill_uniform(rng, u.data(), n, -0.5f, 1.5f);
      fill_normal(rng, z.data(), n, 0.25f, 2.f);
      fill_normal(rng, z64.data(), n, 0.25, 2.0);
      int64_t bad = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float want = rng.normal(uint64_t(i));
        bad += u[size_t(i)] != rng.uniform(uint64_t(i), -0.5f, 1.5f);
        bad += z[size_t(i)] != 0.25f + 2.f * want;
        bad += z64[size_t(i)] != 0.25 + 2.0 * double(want);
      }
      CHECK(bad == 0);
    }
  set_num_threads(before);
}

TEST_CASE("thread count applies to OpenMP") {
  int before = num_threads();
  set_num_threads(1);
  CHECK(num_threads() == 1);
  CHECK(omp_get_max_threads() == 1);
  set_num_threads(2);
  CHECK(omp_get_max_threads() == 2);
  CHECK_THROWS_AS(set_num_threads(0), Error);
  set_num_threads(before);
  CHECK(default_num_threads() >= 1);
}

TEST_CASE("ParamStore binds params, grads and buffers into slabs in declaration order") {
  Tensor w, gw, b, gb, rm;
  int64_t nbt = 5;
  ParamStore store;
  store.param("conv.weight", {4, 3, 3, 3}, &w, &gw);
  store.param("bn.bias", {4}, &b, &gb, /*decay=*/false);
  store.buffer("bn.running_mean", {4}, &rm);
  store.buffer_i64("bn.num_batches_tracked", &nbt);
  CHECK_THROWS_AS(store.param("bn.bias", {4}, &b, &gb), Error);
  store.allocate();
  CHECK(store.num_params() == 108 + 4);
  CHECK(w.data() == store.values().data());
  CHECK(gw.data() == store.grads().data());
  CHECK(b.data() == store.values().data() + 112);  // 108 rounded up to 16 floats
  CHECK(reinterpret_cast<uintptr_t>(b.data()) % 64 == 0);
  CHECK(rm.data() == store.buffers().data());
  CHECK(store.entries().size() == 4);
  CHECK(store.entries()[3].i64 == &nbt);
  CHECK(store.find("bn.bias")->decay == false);
  gw.fill(1.f);
  store.zero_grad();
  CHECK(gw[5] == 0.f);
  CHECK_THROWS_AS(store.allocate(), Error);
  Tensor late, glate;
  CHECK_THROWS_AS(store.param("late", {1}, &late, &glate), Error);
}
