// create_dataset: a stratified, seeded sample of any dataset open_dataset reads, split into
// train/test CSV dataframes (path,label) plus classes.txt, as the CSV dataset reads them back.
// A thin main: flags are parsed here, everything else is mpicnn::data::create_dataset.
#include <boost/program_options.hpp>
#include <iostream>

#include "core/check.h"
#include "data/holdout.h"
#include "data/tools.h"
#include "flags.h"

namespace po = boost::program_options;
using namespace mpicnn;
using namespace mpicnn::data;

namespace {

constexpr const char* kTool = "create_dataset";

constexpr const char* kUsage = R"(Usage: create_dataset -i SOURCE -o DIR [options]

Takes a stratified random sample of a dataset (every class in proportion, at least one sample
of each class when the size allows), splits it stratified into train and test, and writes
DIR/train.csv and DIR/test.csv (header path,label; or one DIR/data.csv with a split column),
DIR/classes.txt, and PNG images under DIR/images/<class>/ when images have to be written
(resized copies, or samples of IDX/CIFAR files, which have no image files of their own).
The same inputs and --seed give byte-identical outputs, whatever --threads is.

)";

constexpr const char* kExamples = R"(
Examples:
  create_dataset -i data/faces -o data/faces_small --size 1000
  create_dataset -i data/faces -o data/faces_64 --fraction 0.5 --resize 64 --seed 3
  create_dataset -d fashion-mnist -o data/fmnist_5k --size 5000 --test-fraction 0.1
  create_dataset -d fashion-mnist --classes 5-9 --size 500 --test-fraction 0 -o data/fmnist_b
  create_dataset -i data/all.csv --split all -o data/split --single-csv
  create_dataset -i data/cifar-10-batches-bin -o data/cifar_2k --size 2000 --resize 64x64
Read the result back as a CSV dataset by naming the file, e.g.
  dataset_stats -i data/faces_small/train.csv
)";

// Parses the flags and runs the tool; errors are thrown, and run_tool reports them.
int run(int argc, char** argv) {
  std::string input, kind, split, output, size_s, fraction_s, test_fraction_s, seed_s, resize_s, threads_s,
      idx_classes_s, classes_s;
  po::options_description opts("Options", 110, 55);
  opts.add_options()
      ("help,h", "show this help")
      ("input,i", po::value(&input)->value_name("PATH"),
       "source dataset: image folder (class subfolders, or train/ and test/ of them), CSV file, "
       "IDX folder or images file, CIFAR folder")
      ("dataset,d", po::value(&kind)->default_value("auto")->value_name("KIND"),
       "auto, imagefolder, csv, idx, mnist, fashion-mnist (no --input needed), cifar10, cifar100, synthetic")
      ("split", po::value(&split)->default_value("train")->value_name("SPLIT"),
       "split of the source to sample: train, test, val or all")
      ("output,o", po::value(&output)->value_name("DIR"), "output folder (required; must be empty unless --force)")
      ("size,n", po::value(&size_s)->value_name("N"), "samples in the whole sample (train + test)")
      ("fraction,f", po::value(&fraction_s)->value_name("F"),
       "fraction of the source to sample, in (0, 1] (default 1: all; not with --size)")
      ("test-fraction,t", po::value(&test_fraction_s)->default_value("0.2")->value_name("F"),
       "share of the sample that goes to test, in [0, 1]")
      ("classes", po::value(&classes_s)->value_name("LIST"),
       "keep only these classes, relabelled 0.. in the order given: indices, ranges and names, "
       "e.g. 0-4 or Sandal,Bag (the class split of a transfer experiment)")
      ("seed", po::value(&seed_s)->default_value("0")->value_name("S"), "random seed of the sample and split")
      ("single-csv", "write one data.csv with a split column (train/test) instead of train.csv and test.csv")
      ("resize", po::value(&resize_s)->value_name("S|HxW"),
       "write resized PNG copies: S sets the shorter side (aspect kept), HxW the exact size")
      ("absolute-paths", "write absolute paths in the CSVs (default: relative to DIR where they share a folder)")
      ("idx-classes", po::value(&idx_classes_s)->default_value("10")->value_name("N"),
       "number of classes of plain IDX data (--dataset idx)")
      ("threads", po::value(&threads_s)->value_name("N"),
       "threads writing images (default: 4 per core, 16 to 64: writes wait on the disk)")
      ("force", "write into a non-empty DIR (an earlier create_dataset output there is replaced)")
      ("skip-bad", "when writing images: leave unreadable source images out of the sample and report them");
  po::variables_map vm;
  if (!parse_flags(argc, argv, opts, kUsage, kExamples, vm)) return 0;

  check_source_flags(kind, split, input);
  CHECK(!output.empty(), "--output is required (the folder to write the CSVs to)");
  CHECK(!(vm.count("size") && vm.count("fraction")), "--size and --fraction both given; choose one");

  CreateOptions opt;
  opt.output = output;
  if (vm.count("size")) {
    opt.size = parse_u64(size_s, "--size");
    CHECK(opt.size > 0, "--size: must be at least 1");
  }
  if (vm.count("fraction")) {
    opt.fraction = parse_double(fraction_s, "--fraction");
    CHECK(opt.fraction > 0 && opt.fraction <= 1, "--fraction: ", fraction_s, " is outside (0, 1]");
  }
  opt.test_fraction = parse_double(test_fraction_s, "--test-fraction");
  CHECK(opt.test_fraction >= 0 && opt.test_fraction <= 1, "--test-fraction: ", test_fraction_s,
        " is outside [0, 1]");
  opt.seed = parse_u64(seed_s, "--seed");
  opt.single_csv = vm.count("single-csv") > 0;
  if (vm.count("resize")) opt.resize = parse_resize(resize_s, "--resize");
  opt.absolute_paths = vm.count("absolute-paths") > 0;
  opt.force = vm.count("force") > 0;
  opt.skip_bad = vm.count("skip-bad") > 0;
  opt.threads = threads_flag(vm, threads_s);

  DatasetSpec spec = source_spec(kind, input, split, idx_classes_s);
  spec.check_files = true;  // a CSV must not name files that are not there
  std::unique_ptr<Dataset> ds = open_dataset(spec);
  if (vm.count("classes")) ds = class_subset(*ds, parse_class_list(classes_s, ds->class_names(), "--classes"));
  std::cout << format_report(create_dataset(*ds, opt));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_tool(kTool, [&] { return run(argc, argv); });
}
