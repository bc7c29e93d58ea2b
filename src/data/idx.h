// IDX files (MNIST, Fashion-MNIST): uint8 image arrays (magic 0x00000803) and label arrays
// (0x00000801), gzipped or raw, validated strictly and read into an InMemoryData. Also the
// gunzip used for them. Not a general IDX reader: other element types are rejected.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace mpicnn::data {

// The whole file, decompressed when it starts with the gzip magic bytes (1f 8b), whatever
// its name. Concatenated gzip members are joined (as gzip -d does); anything else after the
// compressed data, a truncated or corrupt stream, is an Error naming the file.
std::vector<uint8_t> read_maybe_gzip(const std::string& path);
std::vector<uint8_t> gunzip(std::span<const uint8_t> compressed, const std::string& name);

// Checks an IDX buffer of unsigned bytes with `ndims` dimensions (magic, dims > 0, data size
// equal to the product of the dims, exactly), removes the header in place and returns the dims.
std::vector<uint32_t> strip_idx_header(std::vector<uint8_t>& bytes, int ndims, const std::string& name);

// The image and label files of one split in `path`: a folder holding
// {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz], or an images file itself (its labels file
// is the same name with labels-idx1). Missing files are an Error naming what was looked for.
struct IdxFiles {
  std::string images, labels;
};
IdxFiles find_idx_files(const std::string& path, const std::string& split);

// Reads a pair of IDX files: counts must match and every label be below num_classes.
// `class_names` (num_classes entries) defaults to "0", "1", ...
InMemoryData read_idx(const IdxFiles& files, int num_classes, std::vector<std::string> class_names = {},
                      const std::string& name = "idx");

}  // namespace mpicnn::data
