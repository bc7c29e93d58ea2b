// Image decode (JPEG: libjpeg-turbo as PIL drives it; PNG, BMP: stb_image), channel conversion
// and PNG writing. stb_image's implementation is compiled here, once for the whole library.
#include "data/image.h"

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#if defined(__SSSE3__) || defined(__AVX512VBMI__)
// (GCC 12 reports its own _mm512_undefined_* helpers as maybe-uninitialized once inlined.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
#include <jpeglib.h>

#include "core/check.h"
#include "io/atomic_file.h"

#define STB_IMAGE_IMPLEMENTATION
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

// Keeps the first `kept` of every `c` bytes (drops alpha). RGBA -> RGB (PNGs with alpha) takes
// 16 pixels per AVX-512 byte permute, or 4 per SSSE3 shuffle.
void drop_channels(std::uint8_t* dst, const std::uint8_t* src, std::size_t n, int c, int kept) {
  std::size_t i = 0;
#ifdef __AVX512VBMI__
  if (c == 4 && kept == 3) {
    alignas(64) std::uint8_t pick[64] = {};
    for (int k = 0; k < 48; ++k) pick[k] = std::uint8_t(k / 3 * 4 + k % 3);
    const __m512i idx = _mm512_load_si512(pick);
    for (; i + 16 <= n; i += 16)
      _mm512_mask_storeu_epi8(dst + 3 * i, 0x0000FFFFFFFFFFFFull,
                              _mm512_permutexvar_epi8(idx, _mm512_loadu_si512(src + 4 * i)));
  }
#endif
#ifdef __SSSE3__
  if (c == 4 && kept == 3) {
    const __m128i shuf = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
    // Each store writes 16 bytes of which 12 are kept; stop while 4 spare bytes remain.
    for (; i + 6 <= n; i += 4)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 3 * i),
                       _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 4 * i)),
                                        shuf));
  }
#endif
  for (; i < n; ++i)
    for (int k = 0; k < kept; ++k) dst[i * kept + k] = src[i * c + k];
}

// stb_image reads past the end of a BMP as zeros instead of failing (PIL calls such a file
// truncated): an uncompressed BMP must hold its whole pixel array.
void check_bmp_size(std::span<const std::uint8_t> b, const std::string& name) {
  auto u16 = [&](std::size_t o) { return o + 2 <= b.size() ? std::uint32_t(b[o] | b[o + 1] << 8) : 0u; };
  auto u32 = [&](std::size_t o) { return u16(o) | u16(o + 2) << 16; };
  CHECK(b.size() >= 30, name, ": truncated BMP header");
  const std::uint32_t offset = u32(10), header = u32(14);
  std::int64_t w, h;
  std::uint32_t bpp, compression = 0;
  if (header == 12) {  // OS/2 v1 header
    w = u16(18), h = u16(20), bpp = u16(24);
  } else {
    CHECK(b.size() >= 34, name, ": truncated BMP header");
    w = std::int32_t(u32(18)), h = std::int32_t(u32(22)), bpp = u16(28), compression = u32(30);
  }
  if (compression == 1 || compression == 2) return;  // RLE8/RLE4: stb refuses them itself
  // Any other value is not a BMP stb can read, but stb would decode it as uncompressed pixels
  // from past the end of the file: a 40-byte file made 1280 x 131072 pixels (found by tests/fuzz).
  // PIL refuses it too ("Unsupported BMP compression").
  CHECK(compression == 0 || compression == 3 || compression == 6, name, ": unsupported BMP compression ",
        compression);
  const std::uint64_t row = (std::uint64_t(w < 0 ? -w : w) * bpp + 31) / 32 * 4;
  const std::uint64_t need = std::uint64_t(offset) + row * std::uint64_t(h < 0 ? -h : h);
  CHECK(b.size() >= need, name, ": truncated BMP (", b.size(), " of ", need, " bytes)");
}

// A PNG whose chunk runs past the end of the file is truncated or corrupt; refused before stb,
// which grows its IDAT buffer to the declared length first (an 86-byte file asked for 2 GB;
// found by tests/fuzz). Walks the chunks (length, type, data, CRC) up to IEND.
void check_png_chunks(std::span<const std::uint8_t> b, const std::string& name) {
  std::size_t at = 8;  // after the signature
  while (at + 8 <= b.size()) {
    const std::uint64_t length = std::uint64_t(b[at]) << 24 | b[at + 1] << 16 | b[at + 2] << 8 | b[at + 3];
    std::string type(reinterpret_cast<const char*>(b.data() + at + 4), 4);
    for (char& ch : type)
      if (ch < 0x20 || ch > 0x7e) ch = '?';  // the message stays one printable line
    CHECK(at + 12 + length <= b.size(), name, ": truncated or corrupt PNG (chunk '", type, "' at byte ", at,
          " needs ", length + 4, " bytes of data and CRC, the file has ", b.size() - at - 8, " more)");
    if (type == "IEND") return;
    at += 12 + length;
  }
}

// PIL refuses images of more than 2 * Image.MAX_IMAGE_PIXELS pixels (DecompressionBombError).
// The same limit here: a JPEG header of a few hundred bytes can declare 65500 x 65500 pixels,
// 12.9 GB to allocate before the data is found to be missing (found by tests/fuzz).
constexpr std::uint64_t kMaxPixels = 2ull * 89478485;
void check_pixel_count(std::uint64_t w, std::uint64_t h, const std::string& name) {
  CHECK(w * h <= kMaxPixels, name, ": ", w, "x", h, " pixels is more than ", kMaxPixels,
        " (PIL: decompression bomb)");
}

// ---- JPEG: libjpeg-turbo with the settings PIL uses -------------------------------------------
// torchvision's loader is Image.open(f).convert("RGB"), and PIL (Debian's python3-pil) decodes
// with the same libjpeg-turbo: called the same way it gives the same bytes. What PIL's
// JpegDecoder does when not in draft mode (JpegDecode.c, JpegImagePlugin.py):
// - libjpeg's defaults: JDCT_ISLOW integer IDCT, fancy (triangle-filter) chroma upsampling, no
//   scaling; the file's colour space as libjpeg infers it from the JFIF/Adobe markers;
// - the output colour space from the component count: 1 -> JCS_GRAYSCALE (mode L), 3 -> JCS_RGB,
//   4 -> JCS_CMYK (CMYK or YCCK files), read as Adobe's inverted CMYK (rawmode "CMYK;I"), which
//   convert("RGB") turns into RGB with cmyk2rgb; other counts are errors;
// - a suspending source: when the data ends before the last scanline is out PIL raises "image
//   file is truncated" (after it, a missing EOI is accepted); libjpeg's warnings (corrupt data
//   it decodes past) are silent. jpeg_mem_src would instead pad a truncated file with a fake
//   EOI and return gray rows, so the source here suspends at the end of the data as PIL's does;
// - EXIF orientation is not applied (PIL applies it only through ImageOps.exif_transpose).
// libjpeg's default error_exit prints and calls exit(): ours longjmps back into the function
// that called libjpeg, which returns the message; the caller throws. The setjmp functions hold
// no objects with destructors, and the decoder state they change lives in the caller's frame.
struct JpegDecoder {
  jpeg_decompress_struct cinfo{};
  jpeg_error_mgr err{};
  jpeg_source_mgr src{};
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = {};
  bool created = false;
  JpegDecoder() = default;
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;
  ~JpegDecoder() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

enum class JpegStep { ok, truncated, failed };

JpegDecoder& decoder_of(j_common_ptr cinfo) { return *static_cast<JpegDecoder*>(cinfo->client_data); }

[[noreturn]] void jpeg_error_exit(j_common_ptr cinfo) {
  JpegDecoder& d = decoder_of(cinfo);
  cinfo->err->format_message(cinfo, d.message);
  std::longjmp(d.jump, 1);
}
void jpeg_output_message(j_common_ptr) {}  // warnings are silent, as in PIL
void jpeg_init_source(j_decompress_ptr) {}
boolean jpeg_fill_input_buffer(j_decompress_ptr) { return FALSE; }  // the whole file is in the buffer
void jpeg_skip_input_data(j_decompress_ptr cinfo, long n) {
  jpeg_source_mgr* s = cinfo->src;
  const std::size_t k = std::min(n > 0 ? std::size_t(n) : 0, s->bytes_in_buffer);
  s->next_input_byte += k;
  s->bytes_in_buffer -= k;
}

// Reads the header and chooses the output colour space; also finds whether the file has several
// scans (progressive, or a multi-scan baseline), which libjpeg decodes through a coefficient
// buffer of the whole image.
JpegStep jpeg_header(JpegDecoder& d, std::span<const std::uint8_t> bytes, bool& multiple_scans) {
  if (setjmp(d.jump)) return JpegStep::failed;
  d.cinfo.err = jpeg_std_error(&d.err);
  d.err.error_exit = jpeg_error_exit;
  d.err.output_message = jpeg_output_message;
  d.cinfo.client_data = &d;  // kept by jpeg_create_decompress, and read by jpeg_error_exit
  d.created = true;          // jpeg_destroy_decompress copes with a half-created object
  jpeg_create_decompress(&d.cinfo);
  d.src.init_source = jpeg_init_source;
  d.src.fill_input_buffer = jpeg_fill_input_buffer;
  d.src.skip_input_data = jpeg_skip_input_data;
  d.src.resync_to_restart = jpeg_resync_to_restart;
  d.src.term_source = jpeg_init_source;
  d.src.next_input_byte = bytes.data();
  d.src.bytes_in_buffer = bytes.size();
  d.cinfo.src = &d.src;
  if (jpeg_read_header(&d.cinfo, TRUE) != JPEG_HEADER_OK) return JpegStep::truncated;
  switch (d.cinfo.num_components) {
    case 1: d.cinfo.out_color_space = JCS_GRAYSCALE; break;
    case 3: d.cinfo.out_color_space = JCS_RGB; break;
    case 4: d.cinfo.out_color_space = JCS_CMYK; break;
    default:
      std::snprintf(d.message, sizeof d.message, "cannot handle %d-component images (PIL reads 1, 3 or 4)",
                    d.cinfo.num_components);
      return JpegStep::failed;
  }
  multiple_scans = jpeg_has_multiple_scans(&d.cinfo);
  return JpegStep::ok;
}

// Starts decompression: allocates libjpeg's buffers and, for several scans, reads them all.
JpegStep jpeg_start(JpegDecoder& d) {
  if (setjmp(d.jump)) return JpegStep::failed;
  return jpeg_start_decompress(&d.cinfo) ? JpegStep::ok : JpegStep::truncated;
}

// What decoding takes: the output (1 or 3 bytes a pixel) and, for a file of several scans, the
// whole-image coefficient buffer libjpeg fills before the first row comes out (64 two-byte
// coefficients a block, each component's blocks rounded up to its sampling factors).
std::uint64_t jpeg_decode_bytes(const jpeg_decompress_struct& c, bool multiple_scans) {
  const std::uint64_t channels = c.num_components == 1 ? 1 : 3;
  std::uint64_t bytes = std::uint64_t(c.image_width) * c.image_height * channels;
  if (multiple_scans)
    for (int i = 0; i < c.num_components; ++i) {
      const jpeg_component_info& k = c.comp_info[i];
      const std::uint64_t bw = (k.width_in_blocks + k.h_samp_factor - 1) / k.h_samp_factor * k.h_samp_factor;
      const std::uint64_t bh = (k.height_in_blocks + k.v_samp_factor - 1) / k.v_samp_factor * k.v_samp_factor;
      bytes += bw * bh * DCTSIZE2 * sizeof(JCOEF);
    }
  return bytes;
}

// PIL decodes any JPEG under its pixel limit, however much memory that takes; a progressive CMYK
// header of 700 bytes declaring 13377 x 13377 pixels made libjpeg zero 1.4 GB of coefficients
// and the output another 0.5 GB, for 10 s (found by tests/fuzz). Decoding is refused above
// 512 MiB: every single-scan JPEG under the pixel limit fits (3 bytes a pixel), as does a
// progressive 4:2:0 colour photo up to PIL's warning threshold of 89.5 M pixels.
constexpr std::uint64_t kMaxJpegDecodeBytes = std::uint64_t(512) << 20;

// Decodes every scanline into `out` (sized by the caller: 1 channel for gray, 3 otherwise).
JpegStep jpeg_read(JpegDecoder& d, Image& out) {
  if (setjmp(d.jump)) return JpegStep::failed;
  jpeg_decompress_struct& c = d.cinfo;
  const bool cmyk = c.out_color_space == JCS_CMYK;
  JSAMPARRAY scratch = cmyk ? c.mem->alloc_sarray(reinterpret_cast<j_common_ptr>(&c), JPOOL_IMAGE,
                                                  c.output_width * 4, 1)
                            : nullptr;
  JSAMPROW rows[16];
  while (c.output_scanline < c.output_height) {
    const JDIMENSION y = c.output_scanline;
    JDIMENSION got;
    if (cmyk) {
      got = jpeg_read_scanlines(&c, scratch, 1);
      if (got == 1) {
        // PIL's "CMYK;I" unpack and cmyk2rgb: the file holds 255 - ink; with ink C and
        // k = 255 - ink K, R = k - C * k / 255 rounded as PIL's MULDIV255 (never below 0).
        const JSAMPLE* s = scratch[0];
        std::uint8_t* o = out.row(int(y));
        for (JDIMENSION x = 0; x < c.output_width; ++x, s += 4, o += 3) {
          const unsigned k = s[3];
          for (int i = 0; i < 3; ++i) {
            const unsigned t = (255u - s[i]) * k + 128;
            o[i] = std::uint8_t(k - (((t >> 8) + t) >> 8));
          }
        }
      }
    } else {
      const JDIMENSION n = std::min<JDIMENSION>(16, c.output_height - y);
      for (JDIMENSION i = 0; i < n; ++i) rows[i] = out.row(int(y + i));
      got = jpeg_read_scanlines(&c, rows, n);
    }
    if (got == 0) return JpegStep::truncated;  // suspended: the data ended
  }
  // Suspending here means only the EOI marker is missing, which PIL accepts; an error still fails.
  jpeg_finish_decompress(&c);
  return JpegStep::ok;
}

void decode_jpeg(Image& out, std::span<const std::uint8_t> bytes, const std::string& name) {
  JpegDecoder d;
  bool multiple_scans = false;
  JpegStep step = jpeg_header(d, bytes, multiple_scans);
  if (step == JpegStep::ok) {
    check_pixel_count(d.cinfo.image_width, d.cinfo.image_height, name);
    const std::uint64_t need = jpeg_decode_bytes(d.cinfo, multiple_scans);
    CHECK(need <= kMaxJpegDecodeBytes, name, ": decoding this ", d.cinfo.image_width, "x", d.cinfo.image_height,
          multiple_scans ? " multi-scan (progressive)" : "", " JPEG takes ", (need + (1 << 20) - 1) >> 20,
          " MiB, more than the limit of ", kMaxJpegDecodeBytes >> 20, " MiB");
    step = jpeg_start(d);
  }
  if (step == JpegStep::ok) {
    const int c = d.cinfo.output_components == 1 ? 1 : 3;
    out.height = int(d.cinfo.output_height), out.width = int(d.cinfo.output_width), out.channels = c;
    out.pixels.resize(std::size_t(out.height) * out.width * c);
    step = jpeg_read(d, out);
  }
  if (step == JpegStep::truncated)
    FAIL(name, ": truncated JPEG (the data ends before the image does; PIL: image file is truncated)");
  if (step == JpegStep::failed) FAIL(name, ": cannot decode JPEG (", d.message, ")");
}
}  // namespace

void convert_channels(Image& out, const Image& in, int channels) {
  CHECK(channels == 1 || channels == 3, "convert_channels: channels must be 1 or 3, got ", channels);
  CHECK(in.channels == 1 || in.channels == 3, "convert_channels: input has ", in.channels, " channels");
  CHECK(&out != &in, "convert_channels: output and input are the same image");
  out.height = in.height;
  out.width = in.width;
  out.channels = channels;
  const std::size_t n = std::size_t(in.height) * in.width;
  out.pixels.resize(n * channels);
  const std::uint8_t* s = in.pixels.data();
  std::uint8_t* d = out.pixels.data();
  if (in.channels == channels)
    std::memcpy(d, s, n * channels);
  else if (channels == 3)
    for (std::size_t i = 0; i < n; ++i) d[3 * i] = d[3 * i + 1] = d[3 * i + 2] = s[i];
  else
    for (std::size_t i = 0; i < n; ++i) d[i] = luma(s + 3 * i);
}

Image convert_channels(const Image& in, int channels) {
  Image out;
  convert_channels(out, in, channels);
  return out;
}

void decode_image(Image& out, std::span<const std::uint8_t> bytes, int channels, const std::string& name) {
  CHECK(channels == 0 || channels == 1 || channels == 3, name, ": cannot decode to ", channels,
        " channels (1 or 3)");
  CHECK(!bytes.empty(), name, ": empty file");
  // JPEG by PIL's test of the signature (SOI and the next marker's 0xFF).
  if (bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) {
    decode_jpeg(out, bytes, name);
    if (channels != 0 && out.channels != channels) {
      const Image decoded = std::move(out);
      convert_channels(out, decoded, channels);
    }
    return;
  }
  CHECK(bytes.size() <= 0x7fffffffu, name, ": file too large to decode (", bytes.size(), " bytes)");
  const int len = static_cast<int>(bytes.size());
  int w = 0, h = 0, c = 0;
  if (!stbi_info_from_memory(bytes.data(), len, &w, &h, &c)) {
    const char* why = stbi_failure_reason();
    FAIL(name, ": cannot decode image (", why ? why : "unknown reason", ")");
  }
  check_pixel_count(std::uint64_t(w), std::uint64_t(h), name);
  if (bytes.size() >= 2 && bytes[0] == 'B' && bytes[1] == 'M') check_bmp_size(bytes, name);
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), "\x89PNG\r\n\x1a\n", 8) == 0) check_png_chunks(bytes, name);
  std::unique_ptr<stbi_uc, void (*)(void*)> data(stbi_load_from_memory(bytes.data(), len, &w, &h, &c, 0),
                                                 stbi_image_free);
  if (!data) {
    const char* why = stbi_failure_reason();
    FAIL(name, ": cannot decode image (", why ? why : "unknown reason", ")");
  }
  CHECK(w > 0 && h > 0 && c >= 1 && c <= 4, name, ": decoded to an invalid image ", w, "x", h, "x", c);
  // Drop alpha (PIL's convert("RGB") / convert("L") of LA and RGBA ignore it).
  const int kept = c <= 2 ? 1 : 3;
  const std::size_t n = std::size_t(w) * h;
  const int want = channels == 0 ? kept : channels;
  if (want == kept) {
    out.height = h, out.width = w, out.channels = kept;
    out.pixels.resize(n * kept);
    if (kept == c)
      std::memcpy(out.pixels.data(), data.get(), n * c);
    else
      drop_channels(out.pixels.data(), data.get(), n, c, kept);
    return;
  }
  Image tmp(h, w, kept);
  drop_channels(tmp.pixels.data(), data.get(), n, c, kept);
  convert_channels(out, tmp, want);
}

Image decode_image(std::span<const std::uint8_t> bytes, int channels, const std::string& name) {
  Image out;
  decode_image(out, bytes, channels, name);
  return out;
}

Image read_image(const std::string& path, int channels) {
  return decode_image(read_file_bytes(path), channels, path);
}

std::vector<std::uint8_t> encode_png(const Image& img, const std::string& name) {
  CHECK(img.channels == 1 || img.channels == 3, name, ": cannot write a ", img.channels, "-channel PNG");
  CHECK(img.pixels.size() == std::size_t(img.height) * img.width * img.channels && img.height > 0 &&
            img.width > 0,
        name, ": image buffer does not match its size");
  std::vector<std::uint8_t> png;
  auto sink = [](void* ctx, void* data, int size) {
    auto* v = static_cast<std::vector<std::uint8_t>*>(ctx);
    v->insert(v->end(), static_cast<std::uint8_t*>(data), static_cast<std::uint8_t*>(data) + size);
  };
  const int ok = stbi_write_png_to_func(sink, &png, img.width, img.height, img.channels, img.pixels.data(),
                                        img.width * img.channels);
  CHECK(ok, name, ": PNG encoding failed");
  return png;
}

void write_png(const std::string& path, const Image& img) { write_file_atomic(path, encode_png(img, path)); }

}  // namespace mpicnn::data
