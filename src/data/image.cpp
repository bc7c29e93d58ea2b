// Image decode (stb_image: JPEG, PNG, BMP), channel conversion and PNG writing.
// stb_image's implementation is compiled here, once for the whole library.
#include "data/image.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "core/check.h"
#include "io/atomic_file.h"

#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_JPEG
#define STBI_ONLY_PNG
#define STBI_ONLY_BMP
#define STBI_NO_STDIO
#define STBI_FAILURE_USERMSG
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STBI_WRITE_NO_STDIO
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#include <stb_image.h>
#include <stb_image_write.h>
#pragma GCC diagnostic pop

namespace mpicnn::data {

std::vector<std::uint8_t> read_file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  CHECK(f, path, ": cannot open (", std::strerror(errno), ")");
  const std::streamsize n = f.tellg();
  CHECK(n >= 0, path, ": cannot read size");
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(n));
  f.seekg(0);
  CHECK(f.read(reinterpret_cast<char*>(bytes.data()), n), path, ": read failed");
  return bytes;
}

namespace {
// PIL's ImagingConvert RGB -> L: ITU-R 601-2 luma in 16-bit fixed point, rounded.
inline std::uint8_t luma(const std::uint8_t* p) {
  return static_cast<std::uint8_t>((p[0] * 19595u + p[1] * 38470u + p[2] * 7471u + 0x8000u) >> 16);
}
}  // namespace

Image convert_channels(const Image& in, int channels) {
  CHECK(channels == 1 || channels == 3, "convert_channels: channels must be 1 or 3, got ", channels);
  CHECK(in.channels == 1 || in.channels == 3, "convert_channels: input has ", in.channels, " channels");
  if (in.channels == channels) return in;
  Image out(in.height, in.width, channels);
  const std::size_t n = std::size_t(in.height) * in.width;
  const std::uint8_t* s = in.pixels.data();
  std::uint8_t* d = out.pixels.data();
  if (channels == 3)
    for (std::size_t i = 0; i < n; ++i) d[3 * i] = d[3 * i + 1] = d[3 * i + 2] = s[i];
  else
    for (std::size_t i = 0; i < n; ++i) d[i] = luma(s + 3 * i);
  return out;
}

Image decode_image(std::span<const std::uint8_t> bytes, int channels, const std::string& name) {
  CHECK(channels == 0 || channels == 1 || channels == 3, name, ": cannot decode to ", channels,
        " channels (1 or 3)");
  CHECK(!bytes.empty(), name, ": empty file");
  CHECK(bytes.size() <= 0x7fffffffu, name, ": file too large to decode (", bytes.size(), " bytes)");
  int w = 0, h = 0, c = 0;
  std::unique_ptr<stbi_uc, void (*)(void*)> data(
      stbi_load_from_memory(bytes.data(), static_cast<int>(bytes.size()), &w, &h, &c, 0), stbi_image_free);
  if (!data) {
    const char* why = stbi_failure_reason();
    FAIL(name, ": cannot decode image (", why ? why : "unknown reason", ")");
  }
  CHECK(w > 0 && h > 0 && c >= 1 && c <= 4, name, ": decoded to an invalid image ", w, "x", h, "x", c);
  // Drop alpha (PIL's convert("RGB") / convert("L") of LA and RGBA ignore it).
  const int kept = c <= 2 ? 1 : 3;
  Image img(h, w, kept);
  const std::size_t n = std::size_t(w) * h;
  if (kept == c) {
    std::memcpy(img.pixels.data(), data.get(), n * c);
  } else {
    for (std::size_t i = 0; i < n; ++i)
      for (int k = 0; k < kept; ++k) img.pixels[i * kept + k] = data.get()[i * c + k];
  }
  if (channels == 0 || channels == kept) return img;
  return convert_channels(img, channels);
}

Image read_image(const std::string& path, int channels) {
  return decode_image(read_file_bytes(path), channels, path);
}

void write_png(const std::string& path, const Image& img) {
  CHECK(img.channels == 1 || img.channels == 3, path, ": cannot write a ", img.channels, "-channel PNG");
  CHECK(img.pixels.size() == std::size_t(img.height) * img.width * img.channels && img.height > 0 &&
            img.width > 0,
        path, ": image buffer does not match its size");
  std::vector<std::uint8_t> png;
  auto sink = [](void* ctx, void* data, int size) {
    auto* v = static_cast<std::vector<std::uint8_t>*>(ctx);
    v->insert(v->end(), static_cast<std::uint8_t*>(data), static_cast<std::uint8_t*>(data) + size);
  };
  const int ok = stbi_write_png_to_func(sink, &png, img.width, img.height, img.channels, img.pixels.data(),
                                        img.width * img.channels);
  CHECK(ok, path, ": PNG encoding failed");
  write_file_atomic(path, png);
}

}  // namespace mpicnn::data
