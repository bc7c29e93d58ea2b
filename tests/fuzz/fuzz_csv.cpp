// libFuzzer harness: CSV image lists (data/csv_dataset.h): the RFC-4180 parser on the bytes
// in memory, then read_csv_dataset on them as a file (header columns, labels, splits, the
// optional classes.txt beside it). The input is split into scratch files:
//   u8 flags (bits 0-1: split train/test/all/val, bit 2: write classes.txt, bit 3: stat the
//   image files) | u16 LE n | n bytes: classes.txt | the rest: data.csv
// (tests/fuzz/make_corpus.py writes seeds in this form).
#include <cstdint>
#include <string_view>

#include "core/check.h"
#include "data/csv_dataset.h"
#include "fuzz_common.h"

using namespace mpicnn;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = fuzz::scratch_path("csv");
  static const bool made = std::filesystem::create_directory(dir);
  (void)made;
  fuzz::Reader in(data, size);
  const uint8_t flags = in.u8();
  const std::span<const uint8_t> classes = in.take(in.u16());
  const std::span<const uint8_t> csv = in.rest();
  try {
    (void)data::parse_csv(std::string_view(reinterpret_cast<const char*>(csv.data()), csv.size()), "fuzz.csv");
  } catch (const Error&) {
  }
  fuzz::remove_file(dir + "/classes.txt");
  if (flags & 4) fuzz::write_file(dir + "/classes.txt", classes);
  fuzz::write_file(dir + "/data.csv", csv);
  static const char* const kSplits[] = {"train", "test", "all", "val"};
  try {
    const data::FileListData d = data::read_csv_dataset(dir + "/data.csv", kSplits[flags & 3], flags & 8);
    if (d.paths.size() != d.labels.size()) __builtin_trap();
    for (int label : d.labels)
      if (label < 0 || size_t(label) >= d.class_names.size()) __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}
