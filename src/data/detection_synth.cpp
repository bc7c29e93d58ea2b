// The synthetic detection set: filled shapes on textured backgrounds, written as JPEG or PNG plus
// Pascal VOC XML (TinyXML-2) in the face-mask layout. Not a reader (detection.cpp reads it back).
// Rendering is integer arithmetic on Philox draws, so the bytes do not depend on the compiler's
// floating-point contraction, the machine or the thread count.
#include <algorithm>
#include <csetjmp>
#include <cstdio>  // before jpeglib.h, which uses FILE and size_t
#include <cstdlib>
#include <filesystem>
#include <set>
#include <span>

#include <jpeglib.h>
#include <tinyxml2.h>

#include "core/check.h"
#include "core/text.h"
#include "core/rng.h"
#include "data/detection.h"
#include "data/tools.h"
#include "io/atomic_file.h"

namespace mpicnn::data {

namespace fs = std::filesystem;

namespace {

constexpr const char* kTool = "make_detection_dataset";
constexpr float kMaxIou = 0.3f;         // placements overlapping a placed shape more are redrawn
constexpr int64_t kMaxCover = 50;       // ... and so are those covering over 50% of either box
constexpr int kPlacementTries = 50;
constexpr int kMinContrast = 60;        // summed |channel difference| of a fill to its background
constexpr int kJpegQuality = 95;

struct Box {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;  // pixel edges: columns x0..x1-1
  int64_t area() const { return int64_t(x1 - x0) * (y1 - y0); }
};

int64_t intersection(const Box& a, const Box& b) {
  const int w = std::min(a.x1, b.x1) - std::max(a.x0, b.x0), h = std::min(a.y1, b.y1) - std::max(a.y0, b.y0);
  return w > 0 && h > 0 ? int64_t(w) * h : 0;
}

bool overlaps_too_much(const Box& a, const Box& b) {
  const int64_t i = intersection(a, b);
  const int64_t uni = a.area() + b.area() - i;
  return float(i) > kMaxIou * float(uni) || 100 * i > kMaxCover * std::min(a.area(), b.area());
}

// Whether the pixel at doubled offset (du, dv) from the centre of a w x h region belongs to the
// shape; integers only (doubled coordinates put pixel centres on whole numbers).
bool inside(int shape, int64_t du, int64_t dv, int64_t w, int64_t h) {
  const int64_t au = du < 0 ? -du : du, av = dv < 0 ? -dv : dv;
  const int64_t ellipse = du * du * h * h + dv * dv * w * w, r2 = w * w * h * h;
  switch (shape) {
    case 0: return ellipse <= r2;                               // circle
    case 1: return true;                                        // square
    case 2: return 2 * au * h <= (dv + h) * w;                  // triangle, apex up
    case 3: return au * h + av * w <= w * h;                    // diamond
    case 4: return 3 * au <= w || 3 * av <= h;                  // cross
    default: return ellipse <= r2 && 100 * ellipse >= 45 * r2;  // ring
  }
}

// Pixel-edge extent of the shape drawn in region r (the drawn pixels, so the box is tight).
Box shape_extent(int shape, const Box& r) {
  const int64_t w = r.x1 - r.x0, h = r.y1 - r.y0;
  Box b{r.x1, r.y1, r.x0, r.y0};
  for (int y = r.y0; y < r.y1; ++y)
    for (int x = r.x0; x < r.x1; ++x)
      if (inside(shape, 2 * (x - r.x0) + 1 - w, 2 * (y - r.y0) + 1 - h, w, h)) {
        b.x0 = std::min(b.x0, x), b.y0 = std::min(b.y0, y), b.x1 = std::max(b.x1, x + 1), b.y1 = std::max(b.y1, y + 1);
      }
  return b;
}

int shape_index(const std::string& name) {
  const std::vector<std::string>& s = synthetic_shapes();
  const auto it = std::find(s.begin(), s.end(), name);
  return it == s.end() ? -1 : int(it - s.begin());
}

// Per image: linear gradient between two colours, a triangle-wave stripe pattern at a random angle
// and period, and per-pixel noise. All integer arithmetic.
void render_background(Image& img, const Rng& draw, uint64_t& k, uint64_t seed, uint64_t image_index) {
  const int W = img.width, H = img.height;
  int c0[3], c1[3], tint[3];
  for (int c = 0; c < 3; ++c) c0[c] = int(draw.below(k++, 256)), c1[c] = int(draw.below(k++, 256));
  for (int c = 0; c < 3; ++c) tint[c] = 128 + int(draw.below(k++, 129));  // /256: stripe strength per channel
  const int64_t gx = int64_t(draw.below(k++, 513)) - 256, gy = int64_t(draw.below(k++, 513)) - 256;
  const int64_t sx = int64_t(draw.below(k++, 513)) - 256, sy = int64_t(draw.below(k++, 513)) - 256;
  const int64_t amp = 10 + int64_t(draw.below(k++, 31));                // stripe amplitude, grey levels
  const int64_t period = (8 + int64_t(draw.below(k++, 33))) * 256;      // pixels * 256 along (sx, sy)
  const int64_t noise = 8 + int64_t(draw.below(k++, 17));               // +- grey levels
  const int64_t gmin = std::min<int64_t>(0, gx * (W - 1)) + std::min<int64_t>(0, gy * (H - 1));
  const int64_t gspan = std::max<int64_t>(1, std::abs(gx) * (W - 1) + std::abs(gy) * (H - 1));
  const uint64_t noise_stream = stream_id("detection_synth.noise");
  for (int y = 0; y < H; ++y) {
    uint8_t* row = img.row(y);
    for (int x = 0; x < W; ++x) {
      const int64_t t = (gx * x + gy * y - gmin) * 256 / gspan;  // 0..256 along the gradient
      int64_t ph = (sx * x + sy * y) % period;
      if (ph < 0) ph += period;
      const int64_t tri = 2 * std::abs(2 * ph - period) - period;  // -period..period
      const int64_t stripe = amp * tri / period;
      const std::array<uint32_t, 4> r = philox4x32(seed, noise_stream, (image_index << 32) | uint64_t(y * W + x));
      for (int c = 0; c < 3; ++c) {
        const int64_t v = c0[c] + (c1[c] - c0[c]) * t / 256 + stripe * tint[c] / 256 +
                          int64_t(r[c] % uint32_t(2 * noise + 1)) - noise;
        row[3 * x + c] = uint8_t(std::clamp<int64_t>(v, 0, 255));
      }
    }
  }
}

// Mean colour of img over box b.
std::array<int, 3> mean_colour(const Image& img, const Box& b) {
  int64_t sum[3] = {0, 0, 0};
  for (int y = b.y0; y < b.y1; ++y)
    for (int x = b.x0; x < b.x1; ++x)
      for (int c = 0; c < 3; ++c) sum[c] += img.row(y)[3 * x + c];
  const int64_t n = std::max<int64_t>(1, b.area());
  return {int(sum[0] / n), int(sum[1] / n), int(sum[2] / n)};
}

// libjpeg's default error_exit prints and calls exit(): ours longjmps back to jpeg_compress_into,
// which returns the message; the caller throws. That function holds no objects with destructors.
struct JpegEncoder {
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr err{};
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = {};
  unsigned char* buf = nullptr;  // malloc'ed by jpeg_mem_dest
  unsigned long size = 0;
  ~JpegEncoder() {
    jpeg_destroy_compress(&cinfo);
    std::free(buf);
  }
};

[[noreturn]] void jpeg_encode_error(j_common_ptr cinfo) {
  JpegEncoder& e = *static_cast<JpegEncoder*>(cinfo->client_data);
  cinfo->err->format_message(cinfo, e.message);
  std::longjmp(e.jump, 1);
}

bool jpeg_compress_into(JpegEncoder& e, const Image& img) {
  if (setjmp(e.jump)) return false;
  e.cinfo.err = jpeg_std_error(&e.err);
  e.err.error_exit = jpeg_encode_error;
  e.cinfo.client_data = &e;
  jpeg_create_compress(&e.cinfo);
  jpeg_mem_dest(&e.cinfo, &e.buf, &e.size);
  e.cinfo.image_width = JDIMENSION(img.width);
  e.cinfo.image_height = JDIMENSION(img.height);
  e.cinfo.input_components = 3;
  e.cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&e.cinfo);
  jpeg_set_quality(&e.cinfo, kJpegQuality, TRUE);
  jpeg_start_compress(&e.cinfo, TRUE);
  while (e.cinfo.next_scanline < e.cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(img.row(int(e.cinfo.next_scanline)));
    jpeg_write_scanlines(&e.cinfo, &row, 1);
  }
  jpeg_finish_compress(&e.cinfo);
  return true;
}

std::vector<uint8_t> encode_jpeg(const Image& img, const std::string& path) {
  JpegEncoder e;
  CHECK(jpeg_compress_into(e, img) && e.buf != nullptr && e.size > 0, path, ": JPEG encoding failed (",
        e.message, ")");
  return std::vector<uint8_t>(e.buf, e.buf + e.size);
}

void add_text(tinyxml2::XMLElement* parent, const char* name, const std::string& text) {
  parent->InsertNewChildElement(name)->SetText(text.c_str());
}

std::string voc_xml(const std::string& filename, const SyntheticDetectionImage& r,
                    const std::vector<std::string>& classes) {
  tinyxml2::XMLDocument doc;
  tinyxml2::XMLElement* ann = doc.NewElement("annotation");
  doc.InsertEndChild(ann);
  add_text(ann, "folder", "images");
  add_text(ann, "filename", filename);
  tinyxml2::XMLElement* size = ann->InsertNewChildElement("size");
  add_text(size, "width", std::to_string(r.image.width));
  add_text(size, "height", std::to_string(r.image.height));
  add_text(size, "depth", "3");
  add_text(ann, "segmented", "0");
  for (size_t i = 0; i < r.boxes.size(); ++i) {
    tinyxml2::XMLElement* o = ann->InsertNewChildElement("object");
    add_text(o, "name", classes[size_t(r.labels[i] - 1)]);
    add_text(o, "pose", "Unspecified");
    add_text(o, "truncated", "0");
    add_text(o, "occluded", "0");
    add_text(o, "difficult", "0");
    tinyxml2::XMLElement* bb = o->InsertNewChildElement("bndbox");
    const char* names[4] = {"xmin", "ymin", "xmax", "ymax"};
    for (int c = 0; c < 4; ++c) add_text(bb, names[c], std::to_string(int(r.boxes[i][size_t(c)])));
  }
  tinyxml2::XMLPrinter printer;
  doc.Print(&printer);
  return printer.CStr();
}

void check_options(const SyntheticDetectionOptions& o) {
  CHECK(o.min_object >= 4, "synthetic detection: min_object ", o.min_object, " is below 4 pixels");
  CHECK(o.min_size >= 2 * o.min_object && o.min_size >= 32, "synthetic detection: min_size ", o.min_size,
        " must be at least 32 and twice the smallest object (", o.min_object, ")");
  CHECK(o.max_size >= o.min_size && o.max_size <= 8192, "synthetic detection: max_size ", o.max_size,
        " is outside [min_size ", o.min_size, ", 8192]");
  CHECK(o.max_objects >= 1 && o.max_objects <= 100, "synthetic detection: max_objects ", o.max_objects,
        " is outside [1, 100]");
  CHECK(o.format == "jpg" || o.format == "png", "synthetic detection: format '", o.format, "' is not jpg or png");
  CHECK(!o.classes.empty(), "synthetic detection: no classes");
  std::set<std::string> seen;
  for (const std::string& c : o.classes) {
    CHECK(shape_index(c) >= 0, "synthetic detection: class '", c, "' is not a shape the generator draws");
    CHECK(seen.insert(c).second, "synthetic detection: class '", c, "' is listed twice");
  }
}

}  // namespace

SyntheticDetectionImage render_synthetic_detection_image(const SyntheticDetectionOptions& opt, size_t index) {
  check_options(opt);
  const Rng draw(opt.seed, stream_id("detection_synth.layout"));
  uint64_t k = uint64_t(index) << 24;  // this image's draws: 16M per image, far more than used
  SyntheticDetectionImage out;
  const int span = opt.max_size - opt.min_size + 1;
  const int W = opt.min_size + int(draw.below(k++, uint64_t(span)));
  const int H = opt.min_size + int(draw.below(k++, uint64_t(span)));
  out.image = Image(H, W, 3);
  render_background(out.image, draw, k, opt.seed, index);
  const Image background = out.image;

  const int wanted = 1 + int(draw.below(k++, uint64_t(opt.max_objects)));
  // Sides from min_object to 45% of the shorter image side, squared-uniform so small shapes
  // (the hard ones for an FPN) are common.
  const int max_side = std::max(opt.min_object, std::min(W, H) * 45 / 100);
  std::vector<Box> placed;
  for (int n = 0; n < wanted; ++n) {
    for (int attempt = 0; attempt < kPlacementTries; ++attempt) {
      const size_t cls = size_t(draw.below(k++, opt.classes.size()));
      const int shape = shape_index(opt.classes[cls]);
      const int64_t q = int64_t(draw.below(k++, 1001));
      const int w = opt.min_object + int(int64_t(max_side - opt.min_object) * q * q / 1000000);
      // Triangles and crosses get an aspect in [0.75, 1.33]; the other shapes stay as named.
      int h = w;
      if (shape == 2 || shape == 4) h = std::clamp(w * (75 + int(draw.below(k++, 59))) / 100, opt.min_object, H - 2);
      // One pixel of margin: boxes are then valid whether read as pixel edges or 1-based indices.
      const int x0 = 1 + int(draw.below(k++, uint64_t(W - 1 - w))), y0 = 1 + int(draw.below(k++, uint64_t(H - 1 - h)));
      const Box region{x0, y0, x0 + w, y0 + h};
      const Box box = shape_extent(shape, region);
      if (std::any_of(placed.begin(), placed.end(), [&](const Box& p) { return overlaps_too_much(p, box); }))
        continue;
      const std::array<int, 3> bg = mean_colour(background, box);
      std::array<uint8_t, 3> fill{};
      for (int t = 0; t < 20; ++t) {
        int dist = 0;
        for (int c = 0; c < 3; ++c) {
          fill[size_t(c)] = uint8_t(draw.below(k++, 256));
          dist += std::abs(int(fill[size_t(c)]) - bg[size_t(c)]);
        }
        if (dist >= kMinContrast) break;  // after 20 tries the last colour is kept
      }
      const int64_t rw = region.x1 - region.x0, rh = region.y1 - region.y0;
      for (int y = region.y0; y < region.y1; ++y)
        for (int x = region.x0; x < region.x1; ++x)
          if (inside(shape, 2 * (x - region.x0) + 1 - rw, 2 * (y - region.y0) + 1 - rh, rw, rh))
            std::copy(fill.begin(), fill.end(), out.image.row(y) + 3 * x);
      placed.push_back(box);
      out.boxes.push_back({float(box.x0), float(box.y0), float(box.x1), float(box.y1)});
      out.labels.push_back(int32_t(cls + 1));
      out.colours.push_back(fill);
      break;
    }
  }
  return out;
}

DetectionSet make_synthetic_detection_set(const SyntheticDetectionOptions& opt) {
  check_options(opt);
  CHECK(opt.count >= 1, "synthetic detection: count must be at least 1");
  prepare_output_folder(opt.out_dir, opt.force, kTool, {"images", "annotations"});
  const fs::path root(opt.out_dir), images = root / "images", annotations = root / "annotations";
  std::error_code ec;
  fs::create_directories(images, ec);
  CHECK(!ec, images.string(), ": cannot create (", ec.message(), ")");
  fs::create_directories(annotations, ec);
  CHECK(!ec, annotations.string(), ": cannot create (", ec.message(), ")");

  const int digits = std::max<int>(5, int(std::to_string(opt.count - 1).size()));
  DetectionSet set;
  set.classes = opt.classes;
  set.samples.resize(opt.count);
  parallel_for(opt.count, writer_threads(opt.threads), [&](size_t i, int) {
    std::string stem = std::to_string(i);
    stem.insert(0, size_t(std::max(0, digits - int(stem.size()))), '0');
    const std::string filename = stem + "." + opt.format;
    const SyntheticDetectionImage r = render_synthetic_detection_image(opt, i);
    const std::string image_path = (images / filename).string();
    if (opt.format == "png") {
      write_png(image_path, r.image);
    } else {
      write_file_atomic(image_path, encode_jpeg(r.image, image_path));
    }
    const std::string xml = voc_xml(filename, r, opt.classes);
    write_file_atomic((annotations / (stem + ".xml")).string(),
                      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(xml.data()), xml.size()));
    DetectionSample& s = set.samples[i];
    s.image = image_path;
    s.width = r.image.width;
    s.height = r.image.height;
    s.boxes = r.boxes;
    s.labels = r.labels;
    s.difficult.assign(r.boxes.size(), 0);
  });
  return set;
}

std::vector<std::string> parse_shape_list(const std::string& text, const std::string& flag) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string name = text.substr(start, comma - start);
    CHECK(shape_index(name) >= 0, flag, ": '", name, "' is not a shape (", join(synthetic_shapes(), ", "), ")");
    CHECK(std::find(out.begin(), out.end(), name) == out.end(), flag, ": '", name, "' is listed twice");
    out.push_back(name);
    start = comma + 1;
  }
  return out;
}

}  // namespace mpicnn::data
