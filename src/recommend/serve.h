// `recommend serve`'s pages and query parsing, kept apart from the HTTP server (serve.cpp) so
// they are unit-tested without a socket (tests/test_serve.cpp): the suggestion query read from
// URL parameters, the JSON of /api/suggest and /api/runs, and the /suggest form page.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "recommend/recommender.h"
#include "recommend/runs.h"

namespace mpicnn::recommend {

// URL query parameters, decoded, in the order given (a name may repeat: that is an error).
using QueryParams = std::multimap<std::string, std::string>;

// The parameters /suggest and /api/suggest accept: model, data (required), target_top1 (a
// fraction in [0, 1]; empty or absent: rank by time per epoch), max_ranks, max_nodes,
// max_epochs, top, device (cpu or cuda). Empty optional values keep SuggestQuery's defaults
// (an HTML form submits its empty fields). An Error whose one-line message names the
// parameter: an unknown model or parameter, a missing model or data, a value that is not a
// number or out of range, a parameter given twice.
SuggestQuery parse_suggest_query(const QueryParams& params);

// One line for an HTTP text reason: control characters (a newline in an echoed value) become
// spaces, so a reason is always one line.
std::string one_line(std::string_view text);

// {"query": {...}, "suggestions": [{"config": {...}, "seconds_per_epoch", "seconds_sd",
// "epochs_to_target", "top1_epoch", "top1_at_target", "top1_sd", "seconds_to_target",
// "core_hours"}, ...]}; unknown figures are null.
std::string suggestions_json(const SuggestQuery& q, const std::vector<Suggestion>& suggestions);
// [{"name", "dir", "status", "error", "config": {...}, "summary", "epochs",
//   "seconds_per_epoch", "final_top1", "images_per_s"}, ...]
std::string runs_json(const std::vector<RunRecord>& runs);

// The /suggest page: the form (filled in with the submitted parameters, else the defaults),
// `error` (one line) above it when not empty, and the suggestions' table when both `query`
// (the parsed submission) and `suggestions` are given.
struct SuggestPage {
  std::string model_file;  // the recommender's file, shown
  QueryParams submitted;
  const SuggestQuery* query = nullptr;
  const std::vector<Suggestion>* suggestions = nullptr;
  std::string error;
};
std::string render_suggest_page(const SuggestPage& page);

}  // namespace mpicnn::recommend
