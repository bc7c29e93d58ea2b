// dataset_stats: per-channel mean and std (pixels in [0, 1], in the form of the trainer's
// --mean/--std flags) and class counts of any dataset open_dataset reads; --json for scripts.
// A thin main: flags are parsed here, everything else is mpicnn::data::dataset_stats.
#include <boost/program_options.hpp>
#include <iostream>

#include "core/check.h"
#include "data/tools.h"
#include "flags.h"
#include "io/atomic_file.h"

namespace po = boost::program_options;
using namespace mpicnn;
using namespace mpicnn::data;

namespace {

constexpr const char* kTool = "dataset_stats";

constexpr const char* kUsage = R"(Usage: dataset_stats -i SOURCE [options]

Prints the per-channel mean and standard deviation of the pixels (values in [0, 1], over every
pixel of every image used, population std, exact byte counts summed in double) and the number
of samples per class. Images are decoded as the trainer would (optionally resized first).

)";

constexpr const char* kExamples = R"(
Examples:
  dataset_stats -d fashion-mnist
  dataset_stats -i data/faces --resize 256 --limit 2000 --json data/faces/stats.json
  dataset_stats -i data/faces/train.csv --channels 3
  dataset_stats -i data/cifar-10-batches-bin --split test
The line "trainer flags: --mean 0.2860 --std 0.3530" can be pasted into a train command.
)";

// Parses the flags and runs the tool; errors are thrown, and run_tool reports them.
int run(int argc, char** argv) {
  std::string input, kind, split, limit_s, seed_s, resize_s, channels_s, json, threads_s, idx_classes_s;
  po::options_description opts("Options", 110, 55);
  opts.add_options()
      ("help,h", "show this help")
      ("input,i", po::value(&input)->value_name("PATH"),
       "dataset: image folder, CSV file, IDX folder or images file, CIFAR folder")
      ("dataset,d", po::value(&kind)->default_value("auto")->value_name("KIND"),
       "auto, imagefolder, csv, idx, mnist, fashion-mnist (no --input needed), cifar10, cifar100, synthetic")
      ("split", po::value(&split)->default_value("train")->value_name("SPLIT"), "train, test, val or all")
      ("limit", po::value(&limit_s)->value_name("N"),
       "use a stratified random sample of N images (default: all)")
      ("seed", po::value(&seed_s)->default_value("0")->value_name("S"), "random seed of the --limit sample")
      ("resize", po::value(&resize_s)->value_name("S|HxW"),
       "resize every image first: S sets the shorter side (aspect kept), HxW the exact size")
      ("channels", po::value(&channels_s)->default_value("0")->value_name("C"),
       "1 (gray, PIL luma) or 3 (RGB) converts; 0 keeps the dataset's (files: the first image's)")
      ("json", po::value(&json)->value_name("FILE"), "also write the results as JSON to FILE")
      ("idx-classes", po::value(&idx_classes_s)->default_value("10")->value_name("N"),
       "number of classes of plain IDX data (--dataset idx)")
      ("skip-bad", "leave unreadable images out of the statistics and report how many")
      ("threads", po::value(&threads_s)->value_name("N"), "threads decoding images (default: all cores)");
  po::variables_map vm;
  if (!parse_flags(argc, argv, opts, kUsage, kExamples, vm)) return 0;

  check_source_flags(kind, split, input);
  check_choice(channels_s, {"0", "1", "3"}, "--channels");
  StatsOptions opt;
  if (vm.count("limit")) {
    opt.limit = parse_u64(limit_s, "--limit");
    CHECK(opt.limit > 0, "--limit: must be at least 1");
  }
  opt.seed = parse_u64(seed_s, "--seed");
  opt.skip_bad = vm.count("skip-bad") > 0;
  if (vm.count("resize")) opt.resize = parse_resize(resize_s, "--resize");
  opt.channels = std::stoi(channels_s);
  opt.threads = threads_flag(vm, threads_s);
  CHECK(!vm.count("json") || !json.empty(), "--json: empty file name");

  const std::unique_ptr<Dataset> ds = open_dataset(source_spec(kind, input, split, idx_classes_s));
  const DatasetStats stats = dataset_stats(*ds, opt);
  if (!json.empty()) {
    const std::string text = stats_json(stats);
    write_file_atomic(json, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  }
  std::cout << format_stats(stats);
  if (!json.empty()) std::cout << "\nwrote " << json << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_tool(kTool, [&] { return run(argc, argv); });
}
