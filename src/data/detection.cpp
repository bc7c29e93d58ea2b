// Detection annotations read from Pascal VOC XML folders (TinyXML-2) and COCO instances JSON
// (nlohmann), plus the horizontal flip of an image with its boxes. Not the synthetic generator
// (detection_synth.cpp) and not a loader: nothing here batches, resizes or shuffles.
#include "data/detection.h"

#include <tinyxml2.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/check.h"
#include "core/text.h"

namespace mpicnn::data {

namespace fs = std::filesystem;
using nlohmann::json;

size_t DetectionSet::num_objects() const {
  size_t n = 0;
  for (const DetectionSample& s : samples) n += s.boxes.size();
  return n;
}

namespace {

std::string trim(const char* text) {
  std::string s = text ? text : "";
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// The whole text must be one finite number ("48", "48.5"; VOC exports write both).
bool parse_number(const std::string& text, double& v) {
  if (text.empty()) return false;
  char* end = nullptr;
  v = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && std::isfinite(v);
}

// The text of <name> under `parent`; a missing element is an Error saying where (`where`).
std::string xml_text(const tinyxml2::XMLElement* parent, const char* name, const std::string& where) {
  const tinyxml2::XMLElement* e = parent->FirstChildElement(name);
  CHECK(e != nullptr, where, ": missing <", name, ">");
  return trim(e->GetText());
}

double xml_number(const tinyxml2::XMLElement* parent, const char* name, const std::string& where) {
  const std::string text = xml_text(parent, name, where);
  double v = 0;
  CHECK(parse_number(text, v), where, ": <", name, "> is '", text, "', not a number");
  return v;
}

// Image sizes are whole positive pixel counts ("500" or "500.0").
int64_t xml_size(const tinyxml2::XMLElement* size, const char* name, const std::string& where) {
  const double v = xml_number(size, name, where);
  CHECK(v >= 1 && v <= 1e9 && v == std::floor(v), where, ": <", name, "> is ", v, ", not a positive whole number");
  return int64_t(v);
}

std::string format_box(const std::array<float, 4>& b) {
  return detail::concat(b[0], " ", b[1], " ", b[2], " ", b[3]);
}

// The one box rule both formats share: corners ordered and inside [0, W] x [0, H].
void check_box(const std::array<float, 4>& b, int64_t width, int64_t height, const std::string& where) {
  CHECK(b[2] > b[0], where, ": box ", format_box(b), " has xmax <= xmin");
  CHECK(b[3] > b[1], where, ": box ", format_box(b), " has ymax <= ymin");
  CHECK(b[0] >= 0 && b[1] >= 0 && b[2] <= float(width) && b[3] <= float(height), where, ": box ", format_box(b),
        " is outside the ", width, "x", height, " image");
}

// A parsed annotation file, object names not yet turned into labels (collecting needs them all).
struct VocFile {
  DetectionSample sample;
  std::vector<std::string> names;
};

struct VocLayout {
  fs::path images, annotations;
};

VocLayout voc_layout(const std::string& dir) {
  const fs::path root(dir);
  std::error_code ec;
  CHECK(fs::is_directory(root, ec), dir, ": no such folder");
  if (fs::is_directory(root / "annotations", ec) && fs::is_directory(root / "images", ec))
    return {root / "images", root / "annotations"};
  if (fs::is_directory(root / "Annotations", ec) && fs::is_directory(root / "JPEGImages", ec))
    return {root / "JPEGImages", root / "Annotations"};
  FAIL(dir, ": not a Pascal VOC folder (expected images/ and annotations/, or JPEGImages/ and Annotations/)");
}

std::vector<fs::path> voc_files(const std::string& dir, const VocLayout& layout, const std::string& image_set) {
  std::vector<fs::path> files;
  if (!image_set.empty()) {
    const fs::path list = fs::path(dir) / "ImageSets" / "Main" / (image_set + ".txt");
    std::ifstream in(list);
    CHECK(in.good(), list.string(), ": cannot read the image set list");
    std::string line;
    while (std::getline(in, line)) {
      // Per-class lists ("000005  1") carry a flag after the id; the id is the first word.
      const std::string id = trim(line.c_str());
      if (id.empty()) continue;
      files.push_back(layout.annotations / (id.substr(0, id.find_first_of(" \t")) + ".xml"));
    }
    CHECK(!files.empty(), list.string(), ": lists no images");
    return files;
  }
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(layout.annotations, ec)) {
    std::string ext = e.path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (ext == ".xml" && e.is_regular_file(ec)) files.push_back(e.path());
  }
  CHECK(!ec, layout.annotations.string(), ": cannot list (", ec.message(), ")");
  CHECK(!files.empty(), layout.annotations.string(), ": no .xml annotation files");
  std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
    return a.filename().string() < b.filename().string();
  });
  return files;
}

// File-level faults throw; a bad object throws too unless skip_bad, where it is counted in `set`.
VocFile read_voc_xml(const fs::path& xml, const fs::path& image_dir, const std::set<std::string>* known,
                     bool skip_bad, DetectionSet& set) {
  const std::string file = xml.string();
  std::error_code ec;
  CHECK(fs::is_regular_file(xml, ec), file, ": annotation file is not there");
  tinyxml2::XMLDocument doc;
  if (doc.LoadFile(file.c_str()) != tinyxml2::XML_SUCCESS)
    FAIL(file, ": malformed XML (", doc.ErrorName(), " at line ", doc.ErrorLineNum(), ")");
  const tinyxml2::XMLElement* root = doc.RootElement();
  CHECK(root != nullptr && std::string(root->Name()) == "annotation", file, ": root element is not <annotation>");

  VocFile out;
  DetectionSample& s = out.sample;
  const std::string filename = xml_text(root, "filename", file);
  CHECK(!filename.empty(), file, ": <filename> is empty");
  const tinyxml2::XMLElement* size = root->FirstChildElement("size");
  CHECK(size != nullptr, file, ": missing <size>");
  s.width = xml_size(size, "width", file + ": <size>");
  s.height = xml_size(size, "height", file + ": <size>");
  const fs::path image = image_dir / filename;
  CHECK(fs::is_regular_file(image, ec), file, ": image file ", image.string(), " is not there");
  s.image = image.string();

  int index = 0;
  for (const tinyxml2::XMLElement* o = root->FirstChildElement("object"); o; o = o->NextSiblingElement("object")) {
    const std::string where = detail::concat(file, ": object ", ++index);
    try {
      const std::string name = xml_text(o, "name", where);
      CHECK(!name.empty(), where, ": <name> is empty");
      CHECK(known == nullptr || known->count(name), where, ": class '", name, "' is not one of the given classes");
      uint8_t difficult = 0;
      if (o->FirstChildElement("difficult")) {
        const double d = xml_number(o, "difficult", where);
        CHECK(d == 0 || d == 1, where, ": <difficult> is ", d, ", not 0 or 1");
        difficult = uint8_t(d);
      }
      const tinyxml2::XMLElement* bb = o->FirstChildElement("bndbox");
      CHECK(bb != nullptr, where, ": missing <bndbox>");
      const std::string bw = where + ": <bndbox>";
      const std::array<float, 4> box = {float(xml_number(bb, "xmin", bw)), float(xml_number(bb, "ymin", bw)),
                                        float(xml_number(bb, "xmax", bw)), float(xml_number(bb, "ymax", bw))};
      check_box(box, s.width, s.height, where);
      s.boxes.push_back(box);
      s.difficult.push_back(difficult);
      out.names.push_back(name);
    } catch (const Error& e) {
      if (!skip_bad) throw;
      ++set.skipped_objects;
      set.messages.push_back(e.message() + " (object skipped)");
    }
  }
  return out;
}

// ---- COCO JSON field access: every fault names the JSON file and the entry ----------------------

const json& jfield(const json& obj, const char* key, const std::string& where) {
  CHECK(obj.is_object(), where, ": not a JSON object");
  const auto it = obj.find(key);
  CHECK(it != obj.end(), where, ": missing \"", key, "\"");
  return *it;
}

int64_t jint(const json& obj, const char* key, const std::string& where) {
  const json& v = jfield(obj, key, where);
  CHECK(v.is_number_integer(), where, ": \"", key, "\" is ", v.dump(), ", not an integer");
  return v.get<int64_t>();
}

double jnumber(const json& v, const std::string& what, const std::string& where) {
  CHECK(v.is_number() && std::isfinite(v.get<double>()), where, ": ", what, " is ", v.dump(), ", not a number");
  return v.get<double>();
}

const json& jarray(const json& obj, const char* key, const std::string& where) {
  const json& v = jfield(obj, key, where);
  CHECK(v.is_array(), where, ": \"", key, "\" is not an array");
  return v;
}

std::string entry(const std::string& file, const char* array, size_t i, const json& e) {
  const auto it = e.is_object() ? e.find("id") : e.end();
  if (it != e.end() && it->is_number_integer())
    return detail::concat(file, ": ", array, "[", i, "] (id ", it->get<int64_t>(), ")");
  return detail::concat(file, ": ", array, "[", i, "]");
}

// Runs `fn`; with skip_bad an Error from it is counted (in `count`) and noted instead of thrown.
template <class Fn>
bool try_entry(bool skip_bad, size_t& count, std::vector<std::string>& messages, const char* what, Fn&& fn) {
  try {
    fn();
    return true;
  } catch (const Error& e) {
    if (!skip_bad) throw;
    ++count;
    messages.push_back(e.message() + " (" + what + " skipped)");
    return false;
  }
}

}  // namespace

DetectionSet read_voc_folder(const std::string& dir, const std::vector<std::string>& classes, bool skip_bad,
                             const std::string& image_set) {
  const VocLayout layout = voc_layout(dir);
  const std::vector<fs::path> files = voc_files(dir, layout, image_set);
  std::set<std::string> known(classes.begin(), classes.end());
  CHECK(known.size() == classes.size(), dir, ": a class is listed twice");

  DetectionSet set;
  std::vector<VocFile> parsed;
  parsed.reserve(files.size());
  for (const fs::path& xml : files) {
    try_entry(skip_bad, set.skipped_files, set.messages, "file", [&] {
      parsed.push_back(read_voc_xml(xml, layout.images, classes.empty() ? nullptr : &known, skip_bad, set));
    });
  }

  if (classes.empty()) {
    std::set<std::string> found;
    for (const VocFile& f : parsed) found.insert(f.names.begin(), f.names.end());
    set.classes.assign(found.begin(), found.end());
  } else {
    set.classes = classes;
  }
  std::map<std::string, int32_t> label;
  for (size_t k = 0; k < set.classes.size(); ++k) label[set.classes[k]] = int32_t(k + 1);
  for (VocFile& f : parsed) {
    for (const std::string& n : f.names) f.sample.labels.push_back(label.at(n));
    set.samples.push_back(std::move(f.sample));
  }
  return set;
}

DetectionSet read_coco_json(const std::string& json_path, const std::string& image_dir, bool skip_bad) {
  const std::vector<uint8_t> bytes = read_file_bytes(json_path);
  json j;
  try {
    j = json::parse(bytes.begin(), bytes.end());
  } catch (const json::exception& e) {
    FAIL(json_path, ": not valid JSON (", e.what(), ")");
  }
  const json& cats = jarray(j, "categories", json_path);
  const json& images = jarray(j, "images", json_path);
  static const json kNone = json::array();
  const json& anns = j.contains("annotations") ? jarray(j, "annotations", json_path) : kNone;

  DetectionSet set;
  std::map<int64_t, std::string> categories;  // id order is label order
  for (size_t i = 0; i < cats.size(); ++i) {
    const std::string where = entry(json_path, "categories", i, cats[i]);
    const int64_t id = jint(cats[i], "id", where);
    const json& name = jfield(cats[i], "name", where);
    CHECK(name.is_string(), where, ": \"name\" is not a string");
    CHECK(categories.emplace(id, name.get<std::string>()).second, where, ": duplicate category id ", id);
  }
  std::map<int64_t, int32_t> label;
  for (const auto& [id, name] : categories) {
    set.classes.push_back(name);
    label[id] = int32_t(set.classes.size());
  }

  std::map<int64_t, DetectionSample> by_id;  // image id order, as torchvision's CocoDetection
  std::set<int64_t> skipped_ids;
  for (size_t i = 0; i < images.size(); ++i) {
    const std::string where = entry(json_path, "images", i, images[i]);
    int64_t id = 0;
    const bool ok = try_entry(skip_bad, set.skipped_files, set.messages, "image", [&] {
      id = jint(images[i], "id", where);
      CHECK(!by_id.count(id) && !skipped_ids.count(id), where, ": duplicate image id ", id);
      DetectionSample s;
      const json& name = jfield(images[i], "file_name", where);
      CHECK(name.is_string() && !name.get<std::string>().empty(), where, ": \"file_name\" is not a file name");
      s.width = jint(images[i], "width", where);
      s.height = jint(images[i], "height", where);
      CHECK(s.width > 0 && s.height > 0, where, ": size ", s.width, "x", s.height, " is not positive");
      const fs::path image = fs::path(image_dir) / name.get<std::string>();
      std::error_code ec;
      CHECK(fs::is_regular_file(image, ec), where, ": image file ", image.string(), " is not there");
      s.image = image.string();
      by_id.emplace(id, std::move(s));
    });
    // Annotations of a skipped image go with it, as the objects of a skipped VOC file do.
    if (!ok && images[i].is_object() && images[i].contains("id") && images[i]["id"].is_number_integer())
      skipped_ids.insert(images[i]["id"].get<int64_t>());
  }

  for (size_t i = 0; i < anns.size(); ++i) {
    const json& a = anns[i];
    const std::string where = entry(json_path, "annotations", i, a);
    try_entry(skip_bad, set.skipped_objects, set.messages, "annotation", [&] {
      CHECK(a.is_object(), where, ": not a JSON object");
      if (a.contains("iscrowd")) {
        const json& c = a["iscrowd"];
        CHECK(c.is_number_integer() || c.is_boolean(), where, ": \"iscrowd\" is ", c.dump(), ", not 0 or 1");
        // Crowd regions are not objects to detect: torchvision's reference drops them the same way.
        if (c.is_boolean() ? c.get<bool>() : c.get<int64_t>() != 0) {
          ++set.crowd_dropped;
          return;
        }
      }
      const int64_t image_id = jint(a, "image_id", where);
      if (skipped_ids.count(image_id)) return;
      const auto img = by_id.find(image_id);
      CHECK(img != by_id.end(), where, ": image_id ", image_id, " is not in \"images\"");
      const int64_t cat = jint(a, "category_id", where);
      const auto lab = label.find(cat);
      CHECK(lab != label.end(), where, ": category_id ", cat, " is not in \"categories\"");
      const json& bbox = jfield(a, "bbox", where);
      CHECK(bbox.is_array() && bbox.size() == 4, where, ": \"bbox\" is ", bbox.dump(), ", not [x, y, w, h]");
      const double x = jnumber(bbox[0], "bbox x", where), y = jnumber(bbox[1], "bbox y", where);
      const double w = jnumber(bbox[2], "bbox w", where), h = jnumber(bbox[3], "bbox h", where);
      CHECK(w > 0 && h > 0, where, ": bbox ", bbox.dump(), " has width or height <= 0");
      DetectionSample& s = img->second;
      const double W = double(s.width), H = double(s.height), e = kCocoEdgeSlack;
      CHECK(x >= -e && y >= -e && x + w <= W + e && y + h <= H + e, where, ": bbox ", bbox.dump(),
            " is outside the ", s.width, "x", s.height, " image");
      const std::array<float, 4> box = {float(std::clamp(x, 0.0, W)), float(std::clamp(y, 0.0, H)),
                                        float(std::clamp(x + w, 0.0, W)), float(std::clamp(y + h, 0.0, H))};
      check_box(box, s.width, s.height, where);  // a box squeezed to nothing by the clamp
      s.boxes.push_back(box);
      s.labels.push_back(lab->second);
      s.difficult.push_back(0);
    });
  }
  for (auto& [id, s] : by_id) set.samples.push_back(std::move(s));
  return set;
}

namespace {

// The COCO file open_detection_set reads at `p`, or "" for a VOC folder (see there).
std::string coco_json_of(const fs::path& p) {
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) return p.extension() == ".json" ? p.string() : "";
  if (!fs::is_directory(p, ec)) return "";
  for (const char* voc : {"annotations", "Annotations"})
    if (fs::is_directory(p / voc, ec)) return "";
  std::string found;
  for (const fs::directory_entry& e : fs::directory_iterator(p, ec))
    if (e.is_regular_file() && e.path().extension() == ".json") {
      if (!found.empty()) return "";  // several: not one dataset's
      found = e.path().string();
    }
  return found;
}

}  // namespace

OpenedDetectionSet open_detection_set(const std::string& path, const std::vector<std::string>& classes,
                                      bool skip_bad, const std::string& flag, const std::string& whose) {
  std::error_code ec;
  CHECK(fs::exists(path, ec), flag, ": ", path, " does not exist");
  OpenedDetectionSet out;
  const std::string json = coco_json_of(path);
  if (!json.empty()) {
    out.kind = "coco";
    out.description = "COCO JSON " + json;
    out.set = read_coco_json(json, fs::path(json).parent_path().string(), skip_bad);
    CHECK(classes.empty() || out.set.classes == classes, flag, ": ", json, ": its categories (",
          join(out.set.classes, ", "), ") are not ", whose, " classes (", join(classes, ", "), ")");
    return out;
  }
  CHECK(fs::is_directory(path, ec), flag, ": ", path, " is neither a Pascal VOC folder nor a COCO instances .json file");
  out.kind = "voc";
  out.description = "Pascal VOC folder " + path;
  try {
    out.set = read_voc_folder(path, classes, skip_bad);
  } catch (const Error& e) {
    // read_voc_folder says "not one of the given classes": say whose and which.
    std::string m = e.message();
    const std::string given = "is not one of the given classes";
    const size_t at = m.find(given);
    if (at == std::string::npos) throw;
    m.replace(at, given.size(), "is not one of " + whose + " classes (" + join(classes, ", ") + ")");
    FAIL(flag, ": ", m);
  }
  return out;
}

void hflip_boxes(float* boxes, int64_t n, float width) {
  for (int64_t i = 0; i < n; ++i) {
    float* b = boxes + 4 * i;
    const float x1 = b[0];
    b[0] = width - b[2];
    b[2] = width - x1;
  }
}

void load_detection_image(float* pixels, float* boxes, const DetectionSample& s, bool flip) {
  CHECK(s.boxes.size() == s.labels.size(), s.image, ": ", s.boxes.size(), " boxes but ", s.labels.size(), " labels");
  const Image img = read_image(s.image, 3);
  CHECK(img.width == s.width && img.height == s.height, s.image, ": image is ", img.width, "x", img.height,
        " but its annotation says ", s.width, "x", s.height);
  const int64_t H = img.height, W = img.width;
  for (int64_t y = 0; y < H; ++y) {
    const uint8_t* row = img.row(int(y));
    for (int64_t x = 0; x < W; ++x) {
      const uint8_t* p = row + 3 * (flip ? W - 1 - x : x);
      // Division, not a multiply by 1/255: the same floats as torchvision's to_tensor.
      for (int64_t c = 0; c < 3; ++c) pixels[(c * H + y) * W + x] = float(p[c]) / 255.0f;
    }
  }
  for (size_t i = 0; i < s.boxes.size(); ++i) std::copy(s.boxes[i].begin(), s.boxes[i].end(), boxes + 4 * i);
  if (flip) hflip_boxes(boxes, int64_t(s.boxes.size()), float(W));
}

DetectionImage load_detection_image(const DetectionSample& s, bool flip) {
  DetectionImage out;
  out.height = s.height;
  out.width = s.width;
  CHECK(s.width > 0 && s.height > 0, s.image, ": annotation size ", s.width, "x", s.height, " is not positive");
  out.pixels.resize(size_t(3 * s.height * s.width));
  out.boxes.resize(s.boxes.size());
  load_detection_image(out.pixels.data(), out.boxes.empty() ? nullptr : out.boxes.front().data(), s, flip);
  return out;
}

}  // namespace mpicnn::data
