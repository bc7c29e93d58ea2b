// libFuzzer harness: a `./train --config FILE` file (train/options.h), parsed by
// Boost.ProgramOptions and validated by our converters. The option parser only reads the file
// from a path: the input is written to a scratch file first.
#include <cstdint>

#include "core/check.h"
#include "fuzz_common.h"
#include "train/options.h"

using namespace mpicnn;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::scratch_path("train.cfg");
  fuzz::write_file(path, {data, size});
  try {
    const train::TrainOptions o = train::parse_train_options({"--config", path});
    // The record a checkpoint keeps must read back as the same options (options.h promise).
    const std::map<std::string, std::string> config = train::to_config(o);
    train::TrainOptions back = train::parse_train_options({}, &config, "config");
    back.config = o.config;
    if (!(back == o)) __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}
