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

}  // namespace mpicnn::data
