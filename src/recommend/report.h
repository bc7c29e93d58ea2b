// `recommend report`: one self-contained HTML page comparing runs (inline SVG and script, no
// network): a sortable table of configurations and results, loss and accuracy curves per
// epoch, epoch time and images/s against ranks with scaling efficiency, the communication
// share, and the recommender's predicted against measured seconds per epoch when one is given.
// `recommend serve` serves the same page.
#pragma once
#include <string>
#include <vector>

#include "recommend/recommender.h"
#include "recommend/runs.h"

namespace mpicnn::recommend {

struct ReportOptions {
  std::string title = "mpicnn runs";
  const Recommender* recommender = nullptr;  // adds predicted vs measured when set
};

// The whole HTML document.
std::string render_report(const std::vector<RunRecord>& runs, const ReportOptions& options);

}  // namespace mpicnn::recommend
