// IDX reading (MNIST, Fashion-MNIST) and the zlib gunzip it needs.
// Not a writer: tests and data tools write IDX files themselves.
#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <filesystem>

#include "core/check.h"

namespace fs = std::filesystem;

namespace mpicnn::data {

std::vector<uint8_t> gunzip(std::span<const uint8_t> in, const std::string& name) {
  // The last 4 bytes are the size of the last member mod 2^32: a good first guess, unless the
  // stream is cut or corrupt, so it is capped (the buffer doubles when the guess was short).
  size_t guess = in.size() * 4;
  if (in.size() >= 18) {
    const uint8_t* t = in.data() + in.size() - 4;
    const size_t isize = uint32_t(t[0]) | uint32_t(t[1]) << 8 | uint32_t(t[2]) << 16 | uint32_t(t[3]) << 24;
    guess = std::min(isize, in.size() * 16);
  }
  std::vector<uint8_t> out(std::max<size_t>(guess, 1024));
  size_t written = 0, pos = 0;
  do {
    CHECK(in.size() - pos >= 2 && in[pos] == 0x1f && in[pos + 1] == 0x8b, name,
          pos == 0 ? ": not gzip data" : ": unexpected bytes after the gzip data (trailing garbage)");
    // Ends the stream on every path out, errors included.
    struct Stream {
      z_stream zs{};
      bool open = false;
      ~Stream() {
        if (open) inflateEnd(&zs);
      }
    } st;
    z_stream& zs = st.zs;
    CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, name, ": cannot initialise zlib");
    st.open = true;
    int ret = Z_OK;
    while (ret != Z_STREAM_END) {
      if (zs.avail_in == 0) {
        CHECK(pos < in.size(), name, ": truncated gzip data (the stream ends early)");
        zs.next_in = const_cast<Bytef*>(in.data() + pos);
        zs.avail_in = uInt(std::min<size_t>(in.size() - pos, UINT_MAX));
        pos += zs.avail_in;
      }
      if (written == out.size()) out.resize(out.size() * 2);
      zs.next_out = out.data() + written;
      zs.avail_out = uInt(std::min<size_t>(out.size() - written, UINT_MAX));
      const uInt before = zs.avail_out;
      ret = inflate(&zs, Z_NO_FLUSH);
      written += before - zs.avail_out;
      CHECK(ret == Z_OK || ret == Z_STREAM_END || ret == Z_BUF_ERROR, name, ": corrupt gzip data (",
            zs.msg ? zs.msg : "zlib error " + std::to_string(ret), ")");
    }
    pos -= zs.avail_in;  // unused input belongs to the next member (or is garbage)
  } while (pos < in.size());
  out.resize(written);
  return out;
}

std::vector<uint8_t> read_maybe_gzip(const std::string& path) {
  std::vector<uint8_t> bytes = read_file_bytes(path);
  if (bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b) return gunzip(bytes, path);
  return bytes;
}

std::vector<uint32_t> strip_idx_header(std::vector<uint8_t>& bytes, int ndims, const std::string& name) {
  const uint32_t want_magic = 0x0800u | uint32_t(ndims);
  CHECK(bytes.size() >= 4, name, ": too short for an IDX header (", bytes.size(), " bytes)");
  const uint32_t magic = uint32_t(bytes[0]) << 24 | uint32_t(bytes[1]) << 16 | uint32_t(bytes[2]) << 8 | bytes[3];
  auto hex = [](uint32_t v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%08x", v);
    return std::string(buf);
  };
  CHECK(bytes[0] == 0 && bytes[1] == 0, name, ": not an IDX file (magic ", hex(magic), ")");
  CHECK(bytes[2] == 0x08, name, ": IDX element type ", hex(bytes[2]).substr(8),
        " is not supported (only unsigned bytes, 08)");
  CHECK(bytes[3] == ndims, name, ": expected an IDX file with ", ndims, " dimensions (magic ",
        hex(want_magic), "), found magic ", hex(magic));
  const size_t header = 4 + 4 * size_t(ndims);
  CHECK(bytes.size() >= header, name, ": truncated IDX header");
  std::vector<uint32_t> dims(static_cast<size_t>(ndims));
  uint64_t product = 1;
  std::string shape;
  for (int k = 0; k < ndims; ++k) {
    const uint8_t* p = bytes.data() + 4 + 4 * k;
    dims[size_t(k)] = uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
    CHECK(dims[size_t(k)] > 0, name, ": IDX dimension ", k, " is 0");
    // A lying header could overflow the product; nothing real comes near 2^48 bytes.
    CHECK(product <= (uint64_t(1) << 48) / dims[k], name, ": IDX dimensions are impossibly large");
    product *= dims[k];
    shape += (k ? " x " : "") + std::to_string(dims[k]);
  }
  const uint64_t have = bytes.size() - header;
  CHECK(have >= product, name, ": truncated: the header says ", shape, " = ", product,
        " bytes of data, the file has ", have);
  CHECK(have == product, name, ": ", have - product, " bytes of data after the ", shape,
        " the header declares (trailing garbage, or a header that lies about its size)");
  bytes.erase(bytes.begin(), bytes.begin() + std::ptrdiff_t(header));
  return dims;
}

IdxFiles find_idx_files(const std::string& path, const std::string& split) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    const std::string file = fs::path(path).filename().string();
    const size_t at = file.find("images-idx3");
    CHECK(at != std::string::npos, path, ": not an IDX images file (expected a name like train-images-idx3-ubyte.gz)");
    std::string labels = file;
    labels.replace(at, 11, "labels-idx1");
    return {path, (fs::path(path).parent_path() / labels).string()};
  }
  CHECK(fs::is_directory(path, ec), path, ": no such file or folder");
  CHECK(split == "train" || split == "test" || split == "val", path, ": unknown split '", split,
        "' for IDX data (train or test)");
  const std::string prefix = split == "train" ? "train" : "t10k";
  auto pick = [&](const std::string& stem, const char* what) {
    for (const char* ext : {"", ".gz"}) {
      const fs::path p = fs::path(path) / (stem + ext);
      if (fs::exists(p, ec)) return p.string();
    }
    FAIL(path, ": no ", stem, "[.gz] (IDX ", split, " ", what, ")");
  };
  IdxFiles f;
  f.images = pick(prefix + "-images-idx3-ubyte", "images");
  f.labels = pick(prefix + "-labels-idx1-ubyte", "labels");
  return f;
}

InMemoryData read_idx(const IdxFiles& files, int num_classes, std::vector<std::string> class_names,
                      const std::string& name) {
  CHECK(num_classes > 0 && num_classes <= 256, "IDX: number of classes must be in [1, 256], got ", num_classes);
  if (class_names.empty())
    for (int k = 0; k < num_classes; ++k) class_names.push_back(std::to_string(k));
  CHECK(int(class_names.size()) == num_classes, "IDX: ", class_names.size(), " class names for ", num_classes,
        " classes");
  InMemoryData d;
  d.name = name;
  d.pixels = read_maybe_gzip(files.images);
  const std::vector<uint32_t> idims = strip_idx_header(d.pixels, 3, files.images);
  std::vector<uint8_t> labels = read_maybe_gzip(files.labels);
  const std::vector<uint32_t> ldims = strip_idx_header(labels, 1, files.labels);
  CHECK(idims[0] == ldims[0], files.images, " has ", idims[0], " images but ", files.labels, " has ",
        ldims[0], " labels");
  CHECK(idims[1] <= INT_MAX && idims[2] <= INT_MAX, files.images, ": image size too large");
  d.channels = 1;
  d.height = int(idims[1]);
  d.width = int(idims[2]);
  const size_t n = idims[0];
  d.labels.resize(n);
  for (size_t i = 0; i < n; ++i) {
    CHECK(labels[i] < num_classes, files.labels, ": label ", int(labels[i]), " of sample ", i, " is outside [0, ",
          num_classes, ")");
    d.labels[i] = labels[i];
  }
  d.class_names = std::move(class_names);
  d.files = {files.images};
  d.file_index.assign(n, 0);
  d.record.resize(n);
  for (size_t i = 0; i < n; ++i) d.record[i] = i;
  return d;
}

}  // namespace mpicnn::data
