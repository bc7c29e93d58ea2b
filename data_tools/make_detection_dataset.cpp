// make_detection_dataset: writes a seeded synthetic object-detection set (filled shapes on textured
// backgrounds) in the Kaggle face-mask layout, images/ plus Pascal VOC annotations/.
// A thin main: flags are parsed here, everything else is mpicnn::data::make_synthetic_detection_set.
#include <boost/program_options.hpp>
#include <iostream>
#include <map>

#include "core/check.h"
#include "data/detection.h"
#include "data/tools.h"
#include "flags.h"

namespace po = boost::program_options;
using namespace mpicnn;
using namespace mpicnn::data;

namespace {

constexpr const char* kTool = "make_detection_dataset";

constexpr const char* kUsage = R"(Usage: make_detection_dataset --out DIR --count N [options]

Writes N images DIR/images/NNNNN.jpg (or .png) with 1 to --max-objects filled shapes each, in
random colours and sizes (from --min-object pixels), on backgrounds of gradients, stripes and
noise, and one Pascal VOC file DIR/annotations/NNNNN.xml per image (read it back as a VOC
folder). Shapes overlap a little at most (IoU <= 0.3) and never hide one another. Boxes are
tight pixel-edge corners. The same flags give byte-identical files, whatever --threads is;
for a test set, run again with another --seed into another folder.

)";

constexpr const char* kExamples = R"(
Examples:
  make_detection_dataset --out data/shapes/train --count 2000 --seed 1
  make_detection_dataset --out data/shapes/test --count 200 --seed 2
  make_detection_dataset -o data/shapes_small -n 500 --min-size 128 --max-size 192 --classes circle,square
)";

int run(int argc, char** argv) {
  std::string out, count_s, seed_s, min_size_s, max_size_s, classes_s, max_objects_s, min_object_s, format,
      threads_s;
  po::options_description opts("Options", 110, 55);
  opts.add_options()
      ("help,h", "show this help")
      ("out,o", po::value(&out)->value_name("DIR"), "output folder (required; must be empty unless --force)")
      ("count,n", po::value(&count_s)->value_name("N"), "number of images (required)")
      ("seed", po::value(&seed_s)->default_value("0")->value_name("S"), "random seed")
      ("min-size", po::value(&min_size_s)->default_value("160")->value_name("PX"), "smallest image side")
      ("max-size", po::value(&max_size_s)->default_value("320")->value_name("PX"), "largest image side")
      ("classes", po::value(&classes_s)->default_value("circle,square,triangle")->value_name("LIST"),
       "shapes, one class each, labels 1.. in this order: circle, square, triangle, diamond, cross, ring")
      ("max-objects", po::value(&max_objects_s)->default_value("6")->value_name("N"), "most shapes per image")
      ("min-object", po::value(&min_object_s)->default_value("16")->value_name("PX"), "smallest shape side")
      ("format", po::value(&format)->default_value("jpg")->value_name("EXT"), "image files: jpg or png")
      ("threads", po::value(&threads_s)->value_name("N"), "writer threads (default: 4 per core, 16 to 64)")
      ("force", "write into a non-empty DIR (an earlier make_detection_dataset output there is replaced)");
  po::variables_map vm;
  if (!parse_flags(argc, argv, opts, kUsage, kExamples, vm)) return 0;

  CHECK(!out.empty(), "--out is required (the folder to write the dataset to)");
  CHECK(vm.count("count"), "--count is required (the number of images)");
  SyntheticDetectionOptions opt;
  opt.out_dir = out;
  opt.count = parse_u64(count_s, "--count");
  CHECK(opt.count >= 1 && opt.count <= 10000000, "--count: ", count_s, " is outside [1, 10000000]");
  opt.seed = parse_u64(seed_s, "--seed");
  const uint64_t min_size = parse_u64(min_size_s, "--min-size"), max_size = parse_u64(max_size_s, "--max-size");
  const uint64_t max_objects = parse_u64(max_objects_s, "--max-objects");
  const uint64_t min_object = parse_u64(min_object_s, "--min-object");
  CHECK(min_object >= 4 && min_object <= 1024, "--min-object: ", min_object_s, " is outside [4, 1024]");
  CHECK(min_size >= 32 && min_size >= 2 * min_object, "--min-size: ", min_size_s,
        " must be at least 32 and twice --min-object (", min_object, ")");
  CHECK(max_size >= min_size && max_size <= 8192, "--max-size: ", max_size_s, " is outside [--min-size, 8192]");
  CHECK(max_objects >= 1 && max_objects <= 100, "--max-objects: ", max_objects_s, " is outside [1, 100]");
  opt.min_size = int(min_size);
  opt.max_size = int(max_size);
  opt.max_objects = int(max_objects);
  opt.min_object = int(min_object);
  opt.classes = parse_shape_list(classes_s, "--classes");
  check_choice(format, {"jpg", "png"}, "--format");
  opt.format = format;
  opt.force = vm.count("force") > 0;
  opt.threads = threads_flag(vm, threads_s);

  const DetectionSet set = make_synthetic_detection_set(opt);
  std::map<int32_t, size_t> per_class;
  for (const DetectionSample& s : set.samples)
    for (int32_t l : s.labels) ++per_class[l];
  std::cout << "wrote " << set.samples.size() << " images with " << set.num_objects() << " objects to " << out
            << " (seed " << opt.seed << ")\n";
  for (size_t k = 0; k < set.classes.size(); ++k)
    std::cout << "  " << k + 1 << " " << set.classes[k] << ": " << per_class[int32_t(k + 1)] << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_tool(kTool, [&] { return run(argc, argv); });
}
