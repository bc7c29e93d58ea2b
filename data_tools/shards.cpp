// shards: tar shards in the WebDataset layout (KEY.jpg|png + KEY.cls) for ./train --data:
// `pack` writes any classification dataset as shards with their index, `unpack` writes shards
// back as an image folder, `inspect` reads every shard and reports what it holds. A thin main:
// flags are parsed here, the work is mpicnn::data's pack_shards / unpack_shards /
// inspect_shards, the format data/shards.h.
#include <boost/program_options.hpp>
#include <iostream>

#include "core/check.h"
#include "data/holdout.h"
#include "data/shards.h"
#include "data/tools.h"
#include "flags.h"

namespace po = boost::program_options;
using namespace mpicnn;
using namespace mpicnn::data;

namespace {

constexpr const char* kTool = "shards";

constexpr const char* kUsage = R"(Usage: shards pack -i SOURCE -o OUT [options]
       shards unpack -i SHARDS -o OUT [options]
       shards inspect -i SHARDS [options]

pack: writes a dataset (an image folder, a CSV set, IDX, CIFAR, ...) as tar shards in the
  WebDataset layout, OUT/train-000000.tar ... and OUT/test-000000.tar ... (KEY.jpg or .png
  with KEY.cls, the label), and OUT/shards.json (classes, each shard's sample count).
  Image files keep their bytes; fixed-size samples (IDX, CIFAR) become PNGs. The training
  split is written in a random order (--seed), so that each shard mixes the classes.
unpack: writes shards as an image folder OUT/<split>/<class>/<key>.<ext> that ./train reads
  back with the same labels.
inspect: reads every shard whole and prints its samples, against the index; a damaged shard
  is an error naming it and the sample.
SHARDS: a folder of .tar files (with shards.json, or named train*/test*), a brace pattern
  'train-{000000..000146}.tar', a .txt list of shard paths, or one .tar file.

)";

constexpr const char* kExamples = R"(
Examples:
  shards pack -i data/imagenet -o data/imagenet-shards --shard-mb 256
  shards pack -d fashion-mnist -o data/fmnist-shards --shard-mb 8
  shards inspect -i 'data/imagenet-shards/train-{000000..000146}.tar'
  shards unpack -i data/fmnist-shards -o data/fmnist-png
)";

int run(int argc, char** argv) {
  CHECK(argc >= 2, "a command is required: pack, unpack or inspect (see --help)");
  const std::string command = argv[1];
  if (command == "--help" || command == "-h") {
    std::cout << kUsage << kExamples;
    return 0;
  }
  CHECK(command == "pack" || command == "unpack" || command == "inspect", "unknown command '", command,
        "' (pack, unpack or inspect; see --help)");
  std::string input, kind, split, output, shard_mb_s, shard_samples_s, seed_s, threads_s, idx_classes_s;
  po::options_description opts("Options", 110, 55);
  opts.add_options()("help,h", "show this help")(
      "input,i", po::value(&input)->value_name("PATH"),
      "pack: the dataset (default: Debian's Fashion-MNIST with -d fashion-mnist); unpack, inspect: the shards")(
      "dataset,d", po::value(&kind)->default_value("auto")->value_name("KIND"),
      "pack: the source's kind (auto, imagefolder, csv, idx, mnist, fashion-mnist, cifar10, cifar100, synthetic)")(
      "output,o", po::value(&output)->value_name("OUT"), "pack, unpack: the output folder (empty unless --force)")(
      "split", po::value(&split)->default_value("both")->value_name("SPLIT"),
      "train, test or both (a source of one split is its train split)")(
      "shard-mb", po::value(&shard_mb_s)->default_value("256")->value_name("MB"),
      "pack: a shard's size limit in MiB (> 0, fractions too; a shard holds at least one sample)")(
      "shard-samples", po::value(&shard_samples_s)->default_value("0")->value_name("N"),
      "pack: most samples in a shard (0: no limit)")(
      "seed", po::value(&seed_s)->default_value("0")->value_name("N"), "pack: the training split's order")(
      "idx-classes", po::value(&idx_classes_s)->default_value("10")->value_name("N"),
      "pack: number of classes of plain IDX data (--dataset idx)")(
      "threads", po::value(&threads_s)->value_name("N"), "pack: threads reading and encoding images")(
      "force", "write into a non-empty OUT (an earlier run's outputs there are replaced)");
  po::variables_map vm;
  if (!parse_flags(argc - 1, argv + 1, opts, kUsage, kExamples, vm)) return 0;
  check_choice(split, {"train", "test", "both"}, "--split");
  const bool force = vm.count("force") > 0;

  if (command == "pack") {
    check_source_flags(kind, split == "both" ? "train" : split, input);
    CHECK(!output.empty(), "--output is required (the folder to write the shards to)");
    PackOptions opt;
    opt.output = output;
    opt.force = force;
    opt.seed = parse_u64(seed_s, "--seed");
    const double mb = parse_double(shard_mb_s, "--shard-mb");
    CHECK(mb >= 1.0 / 1024 && mb <= 1 << 20, "--shard-mb: ", shard_mb_s, " is outside [1/1024, 1048576]");
    opt.shard_bytes = uint64_t(mb * (1 << 20));
    opt.shard_samples = parse_u64(shard_samples_s, "--shard-samples");
    opt.threads = threads_flag(vm, threads_s);
    DatasetSpec spec = source_spec(kind, input, "train", idx_classes_s);
    const bool one = split == "both" && spec.kind != "synthetic" && holds_one_split(spec);
    std::vector<std::unique_ptr<Dataset>> sets;
    std::vector<std::pair<std::string, const Dataset*>> splits;
    for (const char* s : {"train", "test"}) {
      if ((split != "both" && split != s) || (one && std::string(s) == "test")) continue;
      spec.split = s;
      sets.push_back(open_dataset(spec));
      splits.emplace_back(s, sets.back().get());
    }
    std::cout << format_packed(pack_shards(splits, opt));
    return 0;
  }

  CHECK(!input.empty(), "--input is required (the shards)");
  CHECK(is_shard_path(input), input, ": not tar shards (a folder of .tar files, a pattern with {A..B}, a .txt list "
        "or a .tar file)");
  std::vector<ShardSet> sets;
  std::vector<std::string> names;
  const bool one = shards_hold_one_split(input);
  for (const char* s : {"train", "test"}) {
    if (split != "both" && split != s) continue;
    if (one && std::string(s) == "test") {
      CHECK(split == "both", input, ": no test shards (one split)");
      continue;
    }
    sets.push_back(open_shard_set(input, one ? "all" : s));
    names.push_back(s);
  }
  if (command == "unpack") {
    CHECK(!output.empty(), "--output is required (the folder to write the images to)");
    std::vector<std::pair<std::string, const ShardSet*>> splits;
    for (size_t k = 0; k < sets.size(); ++k) splits.emplace_back(names[k], &sets[k]);
    const std::vector<size_t> n = unpack_shards(splits, {output, force});
    for (size_t k = 0; k < sets.size(); ++k)
      std::cout << names[k] << ": " << sets[k].describe() << "\n  " << n[k] << " images under " << output << "/"
                << names[k] << "/\n";
    return 0;
  }
  bool mismatch = false;
  for (size_t k = 0; k < sets.size(); ++k) {
    std::cout << names[k] << ": " << sets[k].describe() << "\n";
    for (const ShardCheck& c : inspect_shards(sets[k])) {
      std::cout << "  " << c.path << ": " << c.samples << " samples (first " << c.first_key << "), "
                << (c.bytes + (1 << 19)) / (1 << 20) << " MiB of images";
      if (c.samples != c.indexed) std::cout << "; the index says " << c.indexed, mismatch = true;
      std::cout << "\n";
    }
  }
  CHECK(!mismatch, input, ": shard counts differ from the index (rewrite shards.json, or remove it to count)");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_tool(kTool, [&] { return run(argc, argv); });
}
