// libFuzzer harness: a CIFAR-10 or CIFAR-100 binary batch and its class-name file
// (data/cifar.h read_cifar), which reads from a folder. The input is split into scratch files:
//   u8 flags (bit 0: CIFAR-100, bit 1: write the names file) | u16 LE n | n bytes: the names
//   file (batches.meta.txt or fine_label_names.txt) | the rest: test_batch.bin or test.bin
// (tests/fuzz/make_corpus.py writes seeds in this form).
#include <cstdint>

#include "core/check.h"
#include "data/cifar.h"
#include "fuzz_common.h"

using namespace mpicnn;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = fuzz::scratch_path("cifar");
  static const bool made = std::filesystem::create_directory(dir);
  (void)made;
  // Nothing left from the previous input: the reader picks its layout by which files exist.
  for (const char* f : {"test_batch.bin", "test.bin", "batches.meta.txt", "fine_label_names.txt"})
    fuzz::remove_file(dir + "/" + f);
  fuzz::Reader in(data, size);
  const uint8_t flags = in.u8();
  const int classes = flags & 1 ? 100 : 10;
  const std::span<const uint8_t> names = in.take(in.u16());
  if (flags & 2)
    fuzz::write_file(dir + (classes == 10 ? "/batches.meta.txt" : "/fine_label_names.txt"), names);
  fuzz::write_file(dir + (classes == 10 ? "/test_batch.bin" : "/test.bin"), in.rest());
  try {
    const data::InMemoryData d = data::read_cifar(dir, classes, "test");
    if (d.pixels.size() != d.labels.size() * 3 * 32 * 32 || int(d.class_names.size()) != classes)
      __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}
