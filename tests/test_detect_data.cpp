// Detection datasets: the synthetic set written and read back (and read by torchvision's VOC
// parser, its images by PIL + to_tensor, flipped as torchvision's detection reference does),
// byte determinism, tight boxes, every bad VOC annotation and COCO entry with an error naming
// the file (and skip_bad counting it), COCO remapping, and the horizontal flip by hand.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "data/detection.h"
#include "data/image.h"
#include "testing.h"

namespace fs = std::filesystem;
using namespace mpicnn;
using namespace mpicnn::data;
using mpicnn::testing::expect_error;
using mpicnn::testing::TempDir;

namespace {

void spit(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

std::string slurp(const std::string& path) {
  const std::vector<uint8_t> b = read_file_bytes(path);
  return std::string(b.begin(), b.end());
}

std::vector<float> read_f32(const std::string& path) {
  const std::string b = slurp(path);
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

void png(const std::string& path, const Image& img) {
  fs::create_directories(fs::path(path).parent_path());
  write_png(path, img);
}

// A small image: R rises along x, G along y, B fixed, so a flip or a transpose shows.
Image gradient_image(int h, int w) {
  Image img(h, w, 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      img.row(y)[3 * x] = uint8_t(10 * x);
      img.row(y)[3 * x + 1] = uint8_t(5 * y);
      img.row(y)[3 * x + 2] = 40;
    }
  return img;
}

std::string voc_object(const std::string& name, const std::string& box, const std::string& difficult = "0") {
  std::istringstream in(box);
  std::string v[4];
  in >> v[0] >> v[1] >> v[2] >> v[3];
  return "<object><name>" + name + "</name><difficult>" + difficult + "</difficult><bndbox><xmin>" + v[0] +
         "</xmin><ymin>" + v[1] + "</ymin><xmax>" + v[2] + "</xmax><ymax>" + v[3] + "</ymax></bndbox></object>";
}

std::string voc_file(const std::string& image, int w, int h, const std::string& objects) {
  return "<annotation><folder>images</folder><filename>" + image + "</filename><size><width>" + std::to_string(w) +
         "</width><height>" + std::to_string(h) + "</height><depth>3</depth></size>" + objects + "</annotation>\n";
}

// DIR/images/a.png (40 x 30) and DIR/annotations/good.xml with two objects.
void write_good_folder(const TempDir& dir) {
  fs::create_directories(dir.path / "images");
  write_png(dir / "images/a.png", gradient_image(30, 40));
  spit(dir / "annotations/good.xml",
       voc_file("a.png", 40, 30, voc_object("with_mask", "1 2.5 20 30", "1") + voc_object("no_mask", "21 3 40 17")));
}

void expect_good_sample(const DetectionSample& s, const TempDir& dir) {
  CHECK(s.image == dir / "images/a.png");
  CHECK(s.width == 40);
  CHECK(s.height == 30);
  REQUIRE(s.boxes.size() == 2);
  CHECK(s.boxes[0] == std::array<float, 4>{1, 2.5f, 20, 30});
  CHECK(s.boxes[1] == std::array<float, 4>{21, 3, 40, 17});
  CHECK(s.difficult == std::vector<uint8_t>{1, 0});
}

}  // namespace

TEST_CASE("synthetic detection set: read back by read_voc_folder and torchvision, images as to_tensor") {
  TempDir dir;
  SyntheticDetectionOptions opt;
  opt.out_dir = dir / "set";
  opt.count = 5;
  opt.seed = 11;
  opt.min_size = 64;
  opt.max_size = 112;
  opt.min_object = 12;
  const DetectionSet made = make_synthetic_detection_set(opt);
  REQUIRE(made.samples.size() == 5);
  CHECK(made.classes == opt.classes);

  // Our reader: the generator's report, exactly.
  for (const bool collect : {false, true}) {
    const DetectionSet read = read_voc_folder(opt.out_dir, collect ? std::vector<std::string>{} : opt.classes);
    CHECK(read.classes == opt.classes);  // the default classes are already sorted
    CHECK(read.skipped() == 0);
    REQUIRE(read.samples.size() == made.samples.size());
    for (size_t i = 0; i < made.samples.size(); ++i) {
      const DetectionSample &a = made.samples[i], &b = read.samples[i];
      CHECK(a.image == b.image);
      CHECK(a.width == b.width);
      CHECK(a.height == b.height);
      CHECK(a.boxes == b.boxes);
      CHECK(a.labels == b.labels);
      CHECK(a.difficult == b.difficult);
    }
  }

  // The set's own promises: 1..6 objects of at least ~min_object pixels, a pixel off the border,
  // overlapping at most IoU 0.3, sizes within range, several classes used.
  std::set<int32_t> used;
  for (const DetectionSample& s : made.samples) {
    CHECK(s.width >= 64);
    CHECK(s.width <= 112);
    CHECK(s.height >= 64);
    CHECK(s.height <= 112);
    CHECK(s.image.ends_with(".jpg"));
    CHECK(s.boxes.size() >= 1);
    CHECK(s.boxes.size() <= 6);
    for (size_t i = 0; i < s.boxes.size(); ++i) {
      const auto& b = s.boxes[i];
      used.insert(s.labels[i]);
      CHECK(b[0] >= 1);
      CHECK(b[1] >= 1);
      CHECK(b[2] <= float(s.width - 1));
      CHECK(b[3] <= float(s.height - 1));
      CHECK(std::min(b[2] - b[0], b[3] - b[1]) >= float(opt.min_object - 2));
      for (size_t j = 0; j < i; ++j) {
        const auto& c = s.boxes[j];
        const float iw = std::max(0.f, std::min(b[2], c[2]) - std::max(b[0], c[0]));
        const float ih = std::max(0.f, std::min(b[3], c[3]) - std::max(b[1], c[1]));
        const float inter = iw * ih, area_b = (b[2] - b[0]) * (b[3] - b[1]), area_c = (c[2] - c[0]) * (c[3] - c[1]);
        CHECK(inter <= 0.3f * (area_b + area_c - inter) + 1e-3f);
      }
    }
  }
  CHECK(used.size() >= 2);

  // torchvision: its VOC parser gives the same boxes and names; PIL + to_tensor the same pixels,
  // F.hflip and the detection reference's box flip the same flipped image and boxes.
  const std::string ref = dir / "ref";
  fs::create_directories(ref);
  testing::run_python("detect_data_torch.py", testing::shell_quote(opt.out_dir) + " " + testing::shell_quote(ref));
  std::istringstream lines(slurp(ref + "/voc.txt"));
  std::string line;
  size_t n = 0;
  for (; std::getline(lines, line); ++n) {
    REQUIRE(n < made.samples.size());
    const DetectionSample& s = made.samples[n];
    std::istringstream in(line);
    std::string xml, filename;
    int64_t w = 0, h = 0;
    size_t count = 0;
    in >> xml >> filename >> w >> h >> count;
    CHECK(fs::path(s.image).filename().string() == filename);
    CHECK(fs::path(xml).stem() == fs::path(filename).stem());
    CHECK(w == s.width);
    CHECK(h == s.height);
    REQUIRE(count == s.boxes.size());
    for (size_t i = 0; i < count; ++i) {
      std::string name;
      double v[4];
      int difficult = -1;
      in >> name >> v[0] >> v[1] >> v[2] >> v[3] >> difficult;
      CHECK(name == made.classes[size_t(s.labels[i] - 1)]);
      for (int c = 0; c < 4; ++c) CHECK(float(v[c]) == s.boxes[i][size_t(c)]);
      CHECK(difficult == s.difficult[i]);
    }
    const std::string stem = ref + "/" + fs::path(filename).stem().string();
    for (const bool flip : {false, true}) {
      CAPTURE(filename);
      CAPTURE(flip);
      const DetectionImage img = load_detection_image(s, flip);
      CHECK(img.pixels == read_f32(stem + (flip ? ".flip.f32" : ".f32")));
      if (flip) {
        const std::vector<float> want = read_f32(stem + ".boxes.f32");
        REQUIRE(want.size() == 4 * img.boxes.size());
        for (size_t i = 0; i < want.size(); ++i) CHECK(img.boxes[i / 4][i % 4] == want[i]);
      } else {
        CHECK(img.boxes == s.boxes);
      }
    }
  }
  CHECK(n == made.samples.size());
}

TEST_CASE("synthetic detection set: same seed same bytes, whatever the threads; another seed differs") {
  TempDir dir;
  auto make = [&](const std::string& name, uint64_t seed, int threads, const std::string& format) {
    SyntheticDetectionOptions opt;
    opt.out_dir = dir / name;
    opt.count = 4;
    opt.seed = seed;
    opt.min_size = 48;
    opt.max_size = 80;
    opt.min_object = 8;
    opt.classes = {"ring", "cross", "diamond", "triangle"};
    opt.threads = threads;
    opt.format = format;
    make_synthetic_detection_set(opt);
    std::vector<std::string> files;
    for (const char* sub : {"images", "annotations"})
      for (const auto& e : fs::directory_iterator(dir.path / name / sub))
        files.push_back(std::string(sub) + "/" + e.path().filename().string());
    std::sort(files.begin(), files.end());
    std::vector<std::pair<std::string, std::string>> out;
    for (const std::string& f : files) out.emplace_back(f, slurp(dir / (name + "/" + f)));
    return out;
  };
  const auto a = make("a", 5, 1, "png"), b = make("b", 5, 3, "png"), c = make("c", 6, 1, "png");
  REQUIRE(a.size() == 8);
  CHECK(a[0].first == "annotations/00000.xml");
  CHECK(a[4].first == "images/00000.png");
  CHECK(a == b);
  REQUIRE(c.size() == a.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].second != c[i].second);
  CHECK(make("d", 5, 2, "jpg") == make("e", 5, 1, "jpg"));

  // A non-empty folder is refused without force; with it the earlier output is replaced.
  SyntheticDetectionOptions again;
  again.out_dir = dir / "a";
  again.count = 1;
  expect_error([&] { make_synthetic_detection_set(again); }, "is not empty");
  again.force = true;
  CHECK(make_synthetic_detection_set(again).samples.size() == 1);
  CHECK(!fs::exists(dir.path / "a/images/00001.png"));
  again.classes = {"circle", "hexagon"};
  expect_error([&] { make_synthetic_detection_set(again); }, "'hexagon' is not a shape");
  expect_error([] { parse_shape_list("circle,square,circle", "--classes"); }, "--classes: 'circle' is listed twice");
  CHECK(parse_shape_list("ring,square", "--classes") == std::vector<std::string>{"ring", "square"});
}

TEST_CASE("synthetic detection image: boxes are tight around each visible shape, background is textured") {
  SyntheticDetectionOptions opt;
  opt.min_size = 64;
  opt.max_size = 128;
  opt.min_object = 10;
  opt.classes = synthetic_shapes();
  size_t checked = 0;
  for (size_t index = 0; index < 12; ++index) {
    const SyntheticDetectionImage r = render_synthetic_detection_image(opt, index);
    const Image& img = r.image;
    auto is = [&](int x, int y, const std::array<uint8_t, 3>& c) {
      const uint8_t* p = img.row(y) + 3 * x;
      return p[0] == c[0] && p[1] == c[1] && p[2] == c[2];
    };
    for (size_t i = 0; i < r.boxes.size(); ++i) {
      const int x0 = int(r.boxes[i][0]), y0 = int(r.boxes[i][1]), x1 = int(r.boxes[i][2]), y1 = int(r.boxes[i][3]);
      // Shapes drawn later may cover an edge: check only shapes no later box touches (with a margin).
      bool covered = false;
      for (size_t j = i + 1; j < r.boxes.size(); ++j)
        covered |= r.boxes[j][0] <= float(x1) && r.boxes[j][2] >= float(x0) && r.boxes[j][1] <= float(y1) &&
                   r.boxes[j][3] >= float(y0);
      if (covered) continue;
      ++checked;
      const auto& c = r.colours[i];
      bool top = false, bottom = false, left = false, right = false, outside = false;
      for (int x = x0; x < x1; ++x) top |= is(x, y0, c), bottom |= is(x, y1 - 1, c);
      for (int y = y0; y < y1; ++y) left |= is(x0, y, c), right |= is(x1 - 1, y, c);
      for (int x = x0 - 1; x <= x1; ++x) outside |= is(x, y0 - 1, c) || is(x, y1, c);
      for (int y = y0 - 1; y <= y1; ++y) outside |= is(x0 - 1, y, c) || is(x1, y, c);
      CAPTURE(index);
      CAPTURE(i);
      CHECK(top);
      CHECK(bottom);
      CHECK(left);
      CHECK(right);
      CHECK(!outside);
    }
    std::set<std::array<uint8_t, 3>> colours;
    for (int y = 0; y < img.height; ++y)
      for (int x = 0; x < img.width; ++x) {
        const uint8_t* p = img.row(y) + 3 * x;
        colours.insert({p[0], p[1], p[2]});
      }
    CHECK(colours.size() > 500);
  }
  CHECK(checked >= 12);
}

TEST_CASE("synthetic detection image: crowded images keep IoU <= 0.3 and no shape half hidden") {
  SyntheticDetectionOptions opt;
  opt.min_size = 64;
  opt.max_size = 96;
  opt.min_object = 12;
  opt.max_objects = 20;  // more than fit: placements get rejected
  size_t objects = 0, close_pairs = 0;
  for (size_t index = 0; index < 30; ++index) {
    const SyntheticDetectionImage r = render_synthetic_detection_image(opt, index);
    objects += r.boxes.size();
    for (size_t i = 0; i < r.boxes.size(); ++i)
      for (size_t j = 0; j < i; ++j) {
        const auto &b = r.boxes[i], &c = r.boxes[j];
        const float iw = std::max(0.f, std::min(b[2], c[2]) - std::max(b[0], c[0]));
        const float ih = std::max(0.f, std::min(b[3], c[3]) - std::max(b[1], c[1]));
        const float inter = iw * ih, area_b = (b[2] - b[0]) * (b[3] - b[1]), area_c = (c[2] - c[0]) * (c[3] - c[1]);
        CHECK(inter <= 0.3f * (area_b + area_c - inter));
        CHECK(inter <= 0.5f * std::min(area_b, area_c));
        close_pairs += inter > 0.15f * (area_b + area_c - inter);
      }
  }
  CHECK(objects >= 30 * 4);  // crowded indeed
  CHECK(close_pairs >= 3);   // and overlaps near the limit do occur
}

TEST_CASE("read_voc_folder: values as written, classes collected sorted or given, classic layout and image sets") {
  TempDir dir;
  write_good_folder(dir);
  write_png(dir / "images/b.png", gradient_image(20, 20));
  spit(dir / "annotations/b.xml", voc_file("b.png", 20, 20, voc_object("mask_weared_incorrect", "0 0 20 20")));
  spit(dir / "annotations/notes.txt", "not an annotation");
  DetectionSet s = read_voc_folder(dir.path.string());
  CHECK(s.classes == std::vector<std::string>{"mask_weared_incorrect", "no_mask", "with_mask"});
  REQUIRE(s.samples.size() == 2);
  CHECK(s.samples[0].image == dir / "images/b.png");  // b.xml sorts before good.xml
  CHECK(s.samples[0].labels == std::vector<int32_t>{1});
  expect_good_sample(s.samples[1], dir);
  CHECK(s.samples[1].labels == std::vector<int32_t>{3, 2});
  s = read_voc_folder(dir.path.string(), {"with_mask", "no_mask", "mask_weared_incorrect"});
  CHECK(s.samples[1].labels == std::vector<int32_t>{1, 2});
  expect_error([&] { read_voc_folder(dir.path.string(), {"a", "a"}); }, "listed twice");

  // VOC2007 layout, with and without an image set list.
  TempDir voc;
  png(voc / "JPEGImages/000005.png", gradient_image(30, 40));
  png(voc / "JPEGImages/000007.png", gradient_image(30, 40));
  spit(voc / "Annotations/000005.xml", voc_file("000005.png", 40, 30, voc_object("chair", "1 1 10 10")));
  spit(voc / "Annotations/000007.xml", voc_file("000007.png", 40, 30, voc_object("car", "2 2 30 20")));
  spit(voc / "ImageSets/Main/val.txt", "000007\n\n000005\n");
  spit(voc / "ImageSets/Main/car_val.txt", "000007  1\n");
  s = read_voc_folder(voc.path.string());
  REQUIRE(s.samples.size() == 2);
  CHECK(s.classes == std::vector<std::string>{"car", "chair"});
  s = read_voc_folder(voc.path.string(), {}, false, "val");
  REQUIRE(s.samples.size() == 2);
  CHECK(s.samples[0].image == voc / "JPEGImages/000007.png");
  s = read_voc_folder(voc.path.string(), {}, false, "car_val");
  REQUIRE(s.samples.size() == 1);
  CHECK(s.samples[0].boxes[0] == std::array<float, 4>{2, 2, 30, 20});
  expect_error([&] { read_voc_folder(voc.path.string(), {}, false, "test"); }, "test.txt: cannot read");
  expect_error([&] { read_voc_folder(voc / "JPEGImages"); }, "not a Pascal VOC folder");
}

TEST_CASE("read_voc_folder: each bad annotation is an error naming the file, or skipped and counted") {
  struct Case {
    const char* what;
    std::string xml;
    std::string says;
    bool object_level;  // skip_bad keeps the file without the object
  };
  const std::string ok = voc_object("with_mask", "1 1 10 10");
  const std::vector<Case> cases = {
      {"malformed XML", "<annotation><filename>a.png</filename><size>", "malformed XML", false},
      {"wrong root", "<notes><filename>a.png</filename></notes>", "root element is not <annotation>", false},
      {"no filename", "<annotation><size><width>40</width><height>30</height></size></annotation>",
       "missing <filename>", false},
      {"no size", "<annotation><filename>a.png</filename></annotation>", "missing <size>", false},
      {"bad width", voc_file("a.png", 40, 30, ok).replace(voc_file("a.png", 40, 30, ok).find("<width>40"), 9,
                                                          "<width>4x"),
       "<width> is '4x'", false},
      {"missing image", voc_file("nothere.png", 40, 30, ok), "nothere.png is not there", false},
      {"missing bndbox", voc_file("a.png", 40, 30, ok + "<object><name>no_mask</name></object>"),
       "object 2: missing <bndbox>", true},
      {"missing xmax", voc_file("a.png", 40, 30, ok + "<object><name>no_mask</name><bndbox><xmin>1</xmin><ymin>1</ymin>"
                                                    "<ymax>5</ymax></bndbox></object>"),
       "object 2: <bndbox>: missing <xmax>", true},
      {"xmax <= xmin", voc_file("a.png", 40, 30, ok + voc_object("no_mask", "20 1 20 10")),
       "object 2: box 20 1 20 10 has xmax <= xmin", true},
      {"ymax <= ymin", voc_file("a.png", 40, 30, voc_object("no_mask", "2 9 20 8") + ok),
       "object 1: box 2 9 20 8 has ymax <= ymin", true},
      {"beyond width", voc_file("a.png", 40, 30, ok + voc_object("no_mask", "30 1 41 10")),
       "outside the 40x30 image", true},
      {"negative", voc_file("a.png", 40, 30, ok + voc_object("no_mask", "-1 1 4 10")), "outside the 40x30 image", true},
      {"not a number", voc_file("a.png", 40, 30, ok + voc_object("no_mask", "1 1 nan 10")),
       "<xmax> is 'nan', not a number", true},
      {"difficult 2", voc_file("a.png", 40, 30, ok + voc_object("no_mask", "1 1 4 10", "2")), "<difficult> is 2", true},
      {"unknown class", voc_file("a.png", 40, 30, ok + voc_object("dog", "1 1 4 10")),
       "object 2: class 'dog' is not one of the given classes", true},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    TempDir dir;
    write_good_folder(dir);
    spit(dir / "annotations/bad.xml", c.xml);
    const std::vector<std::string> classes = {"with_mask", "no_mask"};
    expect_error([&] { read_voc_folder(dir.path.string(), classes); }, dir / "annotations/bad.xml: ");
    expect_error([&] { read_voc_folder(dir.path.string(), classes); }, c.says);

    const DetectionSet s = read_voc_folder(dir.path.string(), classes, true);
    CHECK(s.skipped() == 1);
    REQUIRE(s.messages.size() == 1);
    CHECK(s.messages[0].find(dir / "annotations/bad.xml") != std::string::npos);
    CHECK(s.messages[0].find(c.says) != std::string::npos);
    REQUIRE(s.samples.size() == (c.object_level ? 2u : 1u));
    const DetectionSample& good = s.samples[0];  // bad.xml sorts first, but "good" has two objects
    if (c.object_level) {
      CHECK(s.skipped_objects == 1);
      CHECK(s.samples[0].boxes.size() == 1);
      CHECK(s.samples[0].labels == std::vector<int32_t>{1});
      expect_good_sample(s.samples[1], dir);
    } else {
      CHECK(s.skipped_files == 1);
      expect_good_sample(good, dir);
    }
  }
}

TEST_CASE("read_coco_json: corners, category ids remapped in id order, iscrowd dropped, bad entries named") {
  TempDir dir;
  png(dir / "img/p.png", gradient_image(30, 40));
  png(dir / "img/q.png", gradient_image(20, 50));
  const std::string cats = R"("categories": [{"id": 7, "name": "zebra"}, {"id": 1, "name": "person"},
                                             {"id": 3, "name": "car"}])";
  const std::string images = R"("images": [{"id": 12, "file_name": "p.png", "width": 40, "height": 30},
                                           {"id": 4, "file_name": "q.png", "width": 50, "height": 20}])";
  auto coco = [&](const std::string& anns) {
    spit(dir / "coco.json", "{" + images + ",\n" + cats + ",\n\"annotations\": [" + anns + "]}");
    return dir / "coco.json";
  };
  const std::string good =
      R"({"id": 1, "image_id": 12, "category_id": 7, "bbox": [1.5, 2, 10, 20.25], "iscrowd": 0},
         {"id": 2, "image_id": 4, "category_id": 3, "bbox": [0, 0, 50, 20]},
         {"id": 3, "image_id": 12, "category_id": 1, "bbox": [5, 5, 5, 5], "iscrowd": 1},
         {"id": 4, "image_id": 12, "category_id": 1, "bbox": [39.5, 0, 1.25, 30]})";
  DetectionSet s = read_coco_json(coco(good), dir / "img");
  CHECK(s.classes == std::vector<std::string>{"person", "car", "zebra"});
  CHECK(s.crowd_dropped == 1);
  CHECK(s.skipped() == 0);
  REQUIRE(s.samples.size() == 2);
  CHECK(s.samples[0].image == dir / "img/q.png");  // image id 4 before 12
  CHECK(s.samples[0].width == 50);
  CHECK(s.samples[0].boxes == std::vector<std::array<float, 4>>{{0, 0, 50, 20}});
  CHECK(s.samples[0].labels == std::vector<int32_t>{2});
  // [39.5, 0, 1.25, 30] ends 0.75 px beyond the 40 px width: within the slack, clamped.
  CHECK(s.samples[1].boxes == std::vector<std::array<float, 4>>{{1.5f, 2, 11.5f, 22.25f}, {39.5f, 0, 40, 30}});
  CHECK(s.samples[1].labels == std::vector<int32_t>{3, 1});
  CHECK(s.samples[1].difficult == std::vector<uint8_t>{0, 0});

  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"id": 9, "image_id": 99, "category_id": 1, "bbox": [1, 1, 2, 2]})", "image_id 99 is not in \"images\""},
      {R"({"id": 9, "image_id": 4, "category_id": 2, "bbox": [1, 1, 2, 2]})", "category_id 2 is not in \"categories\""},
      {R"({"id": 9, "image_id": 4, "category_id": 1, "bbox": [1, 1, 0, 2]})",
       "bbox [1,1,0,2] has width or height <= 0"},
      {R"({"id": 9, "image_id": 4, "category_id": 1, "bbox": [1, 1, 2]})", "\"bbox\" is [1,1,2], not [x, y, w, h]"},
      {R"({"id": 9, "image_id": 4, "category_id": 1, "bbox": [45, 1, 7, 2]})",
       "bbox [45,1,7,2] is outside the 50x20 image"},
      {R"({"id": 9, "image_id": 4, "category_id": 1, "bbox": [1, "a", 7, 2]})", "bbox y is \"a\", not a number"},
      {R"({"id": 9, "image_id": 4, "bbox": [1, 1, 7, 2]})", "missing \"category_id\""},
  };
  for (const auto& [ann, says] : bad) {
    CAPTURE(ann);
    const std::string path = coco(good + ",\n" + ann);
    expect_error([&] { read_coco_json(path, dir / "img"); }, path + ": annotations[4] (id 9): " + says);
    s = read_coco_json(path, dir / "img", true);
    CHECK(s.skipped_objects == 1);
    CHECK(s.crowd_dropped == 1);
    REQUIRE(s.messages.size() == 1);
    CHECK(s.messages[0].find(says) != std::string::npos);
    CHECK(s.num_objects() == 3);
  }

  // A missing image file: the image (and its annotations) go with skip_bad.
  fs::remove(dir.path / "img/q.png");
  const std::string path = coco(good);
  expect_error([&] { read_coco_json(path, dir / "img"); }, path + ": images[1] (id 4): image file ");
  s = read_coco_json(path, dir / "img", true);
  CHECK(s.skipped_files == 1);
  CHECK(s.skipped_objects == 0);
  REQUIRE(s.samples.size() == 1);
  CHECK(s.samples[0].boxes.size() == 2);

  spit(dir / "broken.json", "{\"images\": [");
  expect_error([&] { read_coco_json(dir / "broken.json", dir / "img"); }, dir / "broken.json: not valid JSON");
  spit(dir / "nocat.json", "{\"images\": []}");
  expect_error([&] { read_coco_json(dir / "nocat.json", dir / "img"); }, "nocat.json: missing \"categories\"");
  spit(dir / "dup.json", R"({"images": [], "categories": [{"id": 1, "name": "a"}, {"id": 1, "name": "b"}]})");
  expect_error([&] { read_coco_json(dir / "dup.json", dir / "img"); }, "categories[1] (id 1): duplicate category id 1");
}

TEST_CASE("hflip_boxes: by hand, and twice is the identity") {
  float b[8] = {10, 20, 30, 40, 0, 0, 100, 5};
  hflip_boxes(b, 2, 100);
  const float want[8] = {70, 20, 90, 40, 0, 0, 100, 5};
  for (int i = 0; i < 8; ++i) CHECK(b[i] == want[i]);

  // Quarter-pixel values: W - x is exact, so the round trip must be too.
  Rng rng(3, 1);
  std::vector<float> boxes(400), orig;
  for (size_t i = 0; i < boxes.size(); i += 4) {
    const float x1 = float(rng.below(i, 1000)) / 4, x2 = x1 + float(1 + rng.below(i + 1, 1000)) / 4;
    boxes[i] = x1, boxes[i + 1] = float(rng.below(i + 2, 100)), boxes[i + 2] = x2, boxes[i + 3] = boxes[i + 1] + 1;
  }
  orig = boxes;
  hflip_boxes(boxes.data(), 100, 600);
  CHECK(boxes != orig);
  for (size_t i = 0; i < boxes.size(); i += 4) CHECK(boxes[i] < boxes[i + 2]);
  hflip_boxes(boxes.data(), 100, 600);
  CHECK(boxes == orig);
}

TEST_CASE("load_detection_image: pixels and boxes flip together") {
  TempDir dir;
  Image img(12, 20, 3);
  for (int y = 0; y < 12; ++y)
    for (int x = 0; x < 20; ++x)
      for (int c = 0; c < 3; ++c) img.row(y)[3 * x + c] = uint8_t(3 * x + 2 * y + c);  // dark, all distinct
  for (int y = 2; y <= 5; ++y)
    for (int x = 3; x <= 7; ++x) img.row(y)[3 * x] = 250, img.row(y)[3 * x + 1] = 200, img.row(y)[3 * x + 2] = 150;
  write_png(dir / "sq.png", img);
  DetectionSample s;
  s.image = dir / "sq.png";
  s.width = 20;
  s.height = 12;
  s.boxes = {{3, 2, 8, 6}};  // columns 3..7, rows 2..5 as pixel edges
  s.labels = {1};
  s.difficult = {0};

  const DetectionImage plain = load_detection_image(s, false), flipped = load_detection_image(s, true);
  CHECK(plain.boxes == s.boxes);
  CHECK(flipped.boxes == std::vector<std::array<float, 4>>{{12, 2, 17, 6}});
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 12; ++y)
      for (int x = 0; x < 20; ++x) {
        const size_t at = size_t((c * 12 + y) * 20 + x);
        CHECK(plain.pixels[at] == float(img.row(y)[3 * x + c]) / 255.0f);
        CHECK(flipped.pixels[at] == float(img.row(y)[3 * (19 - x) + c]) / 255.0f);
      }
  // The bright square lies exactly within the flipped box: bright inside, dark outside.
  const auto& b = flipped.boxes[0];
  for (int y = 0; y < 12; ++y)
    for (int x = 0; x < 20; ++x) {
      const bool in_box = float(x) >= b[0] && float(x) + 1 <= b[2] && float(y) >= b[1] && float(y) + 1 <= b[3];
      CHECK((flipped.pixels[size_t(y * 20 + x)] > 0.9f) == in_box);
    }

  s.width = 21;
  expect_error([&] { load_detection_image(s, false); }, dir / "sq.png: image is 20x12 but its annotation says 21x12");
}
