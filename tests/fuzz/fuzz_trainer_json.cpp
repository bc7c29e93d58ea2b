// libFuzzer harness: a checkpoint's trainer.json (io/checkpoint.h read_trainer_state), which
// only reads from a path: the input is written to a scratch file first. A state that parses
// then has its recorded configuration fed back through the option parser, as --resume does
// (train/options.h: the checkpoint's config under the command line).
#include <cstdint>

#include "core/check.h"
#include "fuzz_common.h"
#include "io/checkpoint.h"
#include "train/options.h"

using namespace mpicnn;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::scratch_path("trainer.json");
  fuzz::write_file(path, {data, size});
  try {
    const TrainerState s = read_trainer_state(path);
    (void)checkpoint_name(s);
    (void)train::parse_train_options({}, &s.config, path);
  } catch (const Error&) {
  }
  return 0;
}
