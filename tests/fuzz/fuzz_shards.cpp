// libFuzzer harness: one tar shard (data/shards.h ShardReader, libarchive underneath), read
// whole with images and as a count without them. The input is the .tar file itself
// (tests/fuzz/make_corpus.py writes seeds with Python's tarfile).
#include <cstdint>

#include "core/check.h"
#include "data/shards.h"
#include "fuzz_common.h"

using namespace mpicnn;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::scratch_path("shard.tar");
  fuzz::write_file(path, std::span<const uint8_t>(data, size));
  size_t with = 0, without = 0;
  bool failed = false;
  for (const bool images : {true, false}) {
    try {
      data::ShardReader r(path, 10, images);
      for (data::ShardSample s; r.next(s);) {
        // What the stream relies on: a label in [0, 10), an image unless skipped.
        if (s.label < 0 || s.label >= 10 || (images && s.image_ext.empty())) __builtin_trap();
        ++(images ? with : without);
      }
    } catch (const Error&) {
      failed = true;
    }
  }
  // A count and a read see the same samples (unless the shard is damaged, then one may stop early).
  if (!failed && with != without) __builtin_trap();
  return 0;
}
