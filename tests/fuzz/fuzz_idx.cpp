// libFuzzer harness: an IDX image file and its label file (data/idx.h read_idx), gzipped or raw.
// read_idx only reads from paths, so the input is split into two scratch files:
//   u32 LE n | n bytes: the images file | the rest: the labels file
// (tests/fuzz/make_corpus.py writes seeds in this form).
#include <cstdint>

#include "core/check.h"
#include "data/idx.h"
#include "fuzz_common.h"

using namespace mpicnn;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const data::IdxFiles files{fuzz::scratch_path("images-idx3-ubyte"),
                                    fuzz::scratch_path("labels-idx1-ubyte")};
  fuzz::Reader in(data, size);
  const uint32_t n = in.u32();
  fuzz::write_file(files.images, in.take(n));
  fuzz::write_file(files.labels, in.rest());
  try {
    const data::InMemoryData d = data::read_idx(files, 10);
    // What the loader will index: one label and one height x width image per sample.
    if (d.pixels.size() != d.labels.size() * size_t(d.height) * size_t(d.width)) __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}
