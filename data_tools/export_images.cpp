// export_images: IDX (MNIST, Fashion-MNIST) or CIFAR-10/100 files to PNG image folders
// OUT/<split>/<class>/<index>.png, which the image-folder dataset reads back with the same labels.
// A thin main: flags are parsed here, everything else is mpicnn::data::export_images.
#include <boost/program_options.hpp>
#include <iostream>

#include "core/check.h"
#include "data/tools.h"
#include "flags.h"

namespace po = boost::program_options;
using namespace mpicnn;
using namespace mpicnn::data;

namespace {

constexpr const char* kTool = "export_images";

constexpr const char* kUsage = R"(Usage: export_images -o OUT [options]

Writes the samples of IDX or CIFAR files as PNG images, one folder per class:
  OUT/train/<class>/<index>.png   OUT/test/<class>/<index>.png
<index> is the sample's index in its split, zero-padded so that names sort in index order.
Class folders sort in label order, so the image folder reads back with the same labels: they
are the class names when those already sort so (CIFAR-10, MNIST), else "<label>_<name>"
(Fashion-MNIST: 0_T-shirt_top, 1_Trouser, ...). Without --input: Fashion-MNIST from Debian's
dataset-fashion-mnist package (/usr/share/datasets/fashion-mnist).

)";

constexpr const char* kExamples = R"(
Examples:
  export_images -o data/fmnist_png
  export_images -o data/fmnist_small --limit 500
  export_images -i data/mnist -d mnist -o data/mnist_png --split test
  export_images -i data/cifar-10-batches-bin -o data/cifar10_png
  export_images -i data/cifar-100-binary -d cifar100 -o data/cifar100_png --threads 4
)";

// Parses the flags and runs the tool; errors are thrown, and run_tool reports them.
int run(int argc, char** argv) {
  std::string input, kind, split, output, limit_s, threads_s, idx_classes_s;
  po::options_description opts("Options", 110, 55);
  opts.add_options()
      ("help,h", "show this help")
      ("input,i", po::value(&input)->value_name("PATH"),
       "IDX folder (or an images file) or CIFAR folder (default: Debian's Fashion-MNIST)")
      ("dataset,d", po::value(&kind)->value_name("KIND"),
       "auto, idx, mnist, fashion-mnist, cifar10, cifar100 (default: auto with --input, else fashion-mnist)")
      ("output,o", po::value(&output)->value_name("OUT"), "output folder (required; must be empty unless --force)")
      ("split", po::value(&split)->default_value("both")->value_name("SPLIT"), "train, test or both")
      ("limit", po::value(&limit_s)->value_name("N"), "export only the first N samples of each split")
      ("idx-classes", po::value(&idx_classes_s)->default_value("10")->value_name("N"),
       "number of classes of plain IDX data (--dataset idx)")
      ("threads", po::value(&threads_s)->value_name("N"),
       "threads writing images (default: 4 per core, 16 to 64: writes wait on the disk)")
      ("force", "write into a non-empty OUT (the split folders of an earlier export there are replaced)");
  po::variables_map vm;
  if (!parse_flags(argc, argv, opts, kUsage, kExamples, vm)) return 0;

  if (kind.empty()) kind = input.empty() ? "fashion-mnist" : "auto";
  check_choice(kind, {"auto", "idx", "mnist", "fashion-mnist", "cifar10", "cifar100"}, "--dataset");
  check_choice(split, {"train", "test", "both"}, "--split");
  CHECK(!input.empty() || kind == "fashion-mnist", "--input is required with --dataset ", kind);
  CHECK(!output.empty(), "--output is required (the folder to write the images to)");
  ExportOptions opt;
  opt.output = output;
  opt.force = vm.count("force") > 0;
  if (vm.count("limit")) {
    opt.limit = parse_u64(limit_s, "--limit");
    CHECK(opt.limit > 0, "--limit: must be at least 1");
  }
  opt.threads = threads_flag(vm, threads_s);
  const int idx_classes = idx_classes_flag(idx_classes_s);
  if (kind == "auto") {
    kind = detect_dataset_kind(input);
    CHECK(kind != "imagefolder" && kind != "csv", input, ": is ", kind == "csv" ? "a CSV" : "an image folder",
          " already (export_images reads IDX or CIFAR files; create_dataset samples image files)");
  }

  std::vector<std::unique_ptr<Dataset>> sets;
  std::vector<std::pair<std::string, const Dataset*>> splits;
  for (const char* s : {"train", "test"}) {
    if (split != "both" && split != s) continue;
    DatasetSpec spec;
    spec.kind = kind;
    spec.path = input;
    spec.split = s;
    spec.idx_num_classes = idx_classes;
    sets.push_back(open_dataset(spec));
    splits.emplace_back(s, sets.back().get());
  }
  std::cout << format_export(export_images(splits, opt), splits[0].second->class_names());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_tool(kTool, [&] { return run(argc, argv); });
}
