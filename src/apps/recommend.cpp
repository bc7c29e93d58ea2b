// ./recommend: which configuration should I use? Runs a sweep of ./train configurations, fits a
// model that predicts seconds per epoch and accuracy per epoch from them, suggests the best
// configurations for a model and dataset, and compares runs in an HTML report (also served
// over HTTP). Thin main: each subcommand lives in src/recommend/ (commands.h).
#include <cstring>
#include <iostream>
#include <string>

#include "core/check.h"
#include "recommend/commands.h"

using namespace mpicnn;

namespace {

constexpr const char* kUsage = R"(Usage: ./recommend COMMAND [options]     (./recommend COMMAND -h for its options)

Commands:
  sweep GRID -o DIR          run every configuration of a grid file with ./train, one run
                             directory each; finished runs are skipped, failed ones recorded
  fit RUNS... -o MODEL       fit the recommender (XGBoost) on runs and report its
                             cross-validated error next to a scaling baseline
  suggest --model M --data D -r MODEL
                             rank configurations by predicted time to a target accuracy
  report RUNS... -o FILE     one self-contained HTML file comparing runs (tables, curves,
                             scaling), with predicted vs measured when -r MODEL is given
  serve --runs DIR -r MODEL  serve the report and a suggestion form (and /api/suggest) on
                             127.0.0.1

RUNS are run directories or folders of them (a sweep's -o DIR).
)";

struct Command {
  const char* name;
  int (*main)(int, char**);
};
constexpr Command kCommands[] = {{"sweep", recommend::sweep_main},
                                 {"fit", recommend::fit_main},
                                 {"suggest", recommend::suggest_main},
                                 {"report", recommend::report_main},
                                 {"serve", recommend::serve_main}};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  for (const Command& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    try {
      return c.main(argc - 1, argv + 1);
    } catch (const Error& e) {
      std::cout.flush();
      std::cerr << "recommend " << c.name << ": " << e.message() << std::endl;
      return 1;
    } catch (const std::exception& e) {
      std::cout.flush();
      std::cerr << "recommend " << c.name << ": " << e.what() << std::endl;
      return 1;
    }
  }
  std::cerr << "recommend: unknown command '" << argv[1] << "' (sweep, fit, suggest, report, serve; -h for help)"
            << std::endl;
  return 2;
}
