// What the data-tool mains share beyond run_tool: parsing their Boost flags with --help, and the
// source flags of the tools that read any dataset kind (create_dataset, dataset_stats).
#pragma once
#include <boost/program_options.hpp>
#include <iostream>
#include <string>

#include "core/check.h"
#include "data/tools.h"

namespace mpicnn::data {

// Parses argv into `vm`. With --help it prints the usage, the flags and the examples and returns
// false: the tool then exits 0 without running.
inline bool parse_flags(int argc, char** argv, const boost::program_options::options_description& opts,
                        const char* usage, const char* examples,
                        boost::program_options::variables_map& vm) {
  namespace po = boost::program_options;
  po::store(po::command_line_parser(argc, argv).options(opts).run(), vm);
  po::notify(vm);
  if (!vm.count("help")) return true;
  std::cout << usage << opts << examples;
  return false;
}

// --dataset, --split and --input of a tool that reads any dataset kind.
inline void check_source_flags(const std::string& kind, const std::string& split, const std::string& input) {
  check_choice(kind, {"auto", "imagefolder", "csv", "idx", "mnist", "fashion-mnist", "cifar10", "cifar100",
                      "synthetic"},
               "--dataset");
  check_choice(split, {"train", "test", "val", "all"}, "--split");
  CHECK(!input.empty() || kind == "fashion-mnist" || kind == "synthetic",
        "--input is required (a dataset folder or file; only --dataset fashion-mnist or synthetic go without)");
}

// --threads N within [1, 1024]; 0 (the tool's default count) when the flag is not given.
inline int threads_flag(const boost::program_options::variables_map& vm, const std::string& text) {
  if (!vm.count("threads")) return 0;
  const uint64_t t = parse_u64(text, "--threads");
  CHECK(t >= 1 && t <= 1024, "--threads: ", text, " is outside [1, 1024]");
  return int(t);
}

// --idx-classes N within [1, 256]: the classes of plain IDX data.
inline int idx_classes_flag(const std::string& text) {
  const uint64_t n = parse_u64(text, "--idx-classes");
  CHECK(n >= 1 && n <= 256, "--idx-classes: ", text, " is outside [1, 256]");
  return int(n);
}

// The dataset the source flags name (--dataset, --input, --split, --idx-classes).
inline DatasetSpec source_spec(const std::string& kind, const std::string& input, const std::string& split,
                               const std::string& idx_classes) {
  DatasetSpec spec;
  spec.kind = kind;
  spec.path = input;
  spec.split = split;
  spec.idx_num_classes = idx_classes_flag(idx_classes);
  return spec;
}

}  // namespace mpicnn::data
