// 8-bit images as decoded from files (HWC, 1 or 3 channels) and the decode entry points.
// Not a general image library: preprocessing (resize, crop, normalize, augment) lives in
// transform.h; this file only turns bytes into pixels and back.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mpicnn::data {

struct Image {
  int height = 0, width = 0, channels = 0;  // channels is 1 (gray) or 3 (RGB)
  std::vector<std::uint8_t> pixels;         // (H, W, C) interleaved, row-major

  Image() = default;
  Image(int h, int w, int c) : height(h), width(w), channels(c), pixels(std::size_t(h) * w * c) {}
  std::uint8_t* row(int y) { return pixels.data() + std::size_t(y) * width * channels; }
  const std::uint8_t* row(int y) const { return pixels.data() + std::size_t(y) * width * channels; }
};

// Whole file as bytes; a missing or unreadable file is an Error naming it.
std::vector<std::uint8_t> read_file_bytes(const std::string& path);

// Decodes JPEG (libjpeg-turbo with PIL's settings: the pixels of PIL's Image.open, CMYK JPEGs
// as PIL's convert("RGB") of them), PNG or BMP. `channels` 1 or 3 converts (gray -> RGB
// replicates; RGB -> gray uses PIL's convert("L") luma, (299 R + 587 G + 114 B) / 1000), 0 keeps
// what the file has (gray+alpha -> gray, RGBA -> RGB: alpha is dropped as PIL's convert("RGB")
// does). `name` is the file or sample the bytes came from; a truncated, corrupt or unsupported
// file is an Error naming it and saying why (a JPEG fails where PIL raises, see image.cpp), and
// so is one of more than 178956970 pixels (PIL's DecompressionBombError limit).
Image decode_image(std::span<const std::uint8_t> bytes, int channels, const std::string& name);
// The same into `out`, reusing its pixel storage (a loader thread keeps one Image per thread).
void decode_image(Image& out, std::span<const std::uint8_t> bytes, int channels, const std::string& name);
Image read_image(const std::string& path, int channels);

// Gray <-> RGB as in decode_image; returns a copy when the count already matches.
Image convert_channels(const Image& in, int channels);
// The same into `out` (reusing its storage); `out` must not be `in`.
void convert_channels(Image& out, const Image& in, int channels);

// PNG writer (for the data tools); written atomically (temp file, rename).
void write_png(const std::string& path, const Image& img);
// The PNG bytes of a 1- or 3-channel image (errors name `name`).
std::vector<std::uint8_t> encode_png(const Image& img, const std::string& name);

}  // namespace mpicnn::data
