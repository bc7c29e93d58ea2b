// `recommend serve` without a socket (src/recommend/serve.h): the suggestion query read from URL
// parameters (every refusal names the parameter), HTML escaping, and the JSON and /suggest page
// built from hand-made suggestions and runs. The server itself: tests/shell/test_serve.sh.
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "recommend/report_chart.h"  // html_escape
#include "recommend/serve.h"
#include "testing.h"

using namespace mpicnn;
using namespace mpicnn::recommend;
using mpicnn::testing::expect_error;
using nlohmann::json;

using mpicnn::recommend::report_detail::html_escape;

namespace {

QueryParams base() { return {{"model", "lenet"}, {"data", "synthetic"}}; }
QueryParams with(QueryParams p, const std::string& k, const std::string& v) {
  p.erase(k);
  p.emplace(k, v);
  return p;
}

Suggestion suggestion(int ranks, int epochs_to_target) {
  Suggestion s;
  s.config.model = "lenet";
  s.config.dataset = "synthetic";
  s.config.ranks = ranks;
  s.config.threads_per_rank = 1;
  s.config.batch_per_rank = 64;
  s.config.image_size = 28;
  s.prediction.seconds_per_epoch = 2.5;
  s.prediction.seconds_sd = 0.25;
  s.prediction.top1 = {0.5, 0.7, 0.8};
  s.prediction.top1_sd = {0.05, 0.04, 0.03};
  s.epochs_to_target = epochs_to_target;
  s.seconds_to_target = 2.5 * epochs_to_target;
  s.core_hours = s.seconds_to_target * ranks / 3600;
  return s;
}

}  // namespace

TEST_CASE("serve: parse_suggest_query reads the parameters and keeps defaults for empty ones") {
  const SuggestQuery d;
  SuggestQuery q = parse_suggest_query(base());
  CHECK(q.model == "lenet");
  CHECK(q.data == "synthetic");
  CHECK(q.target_top1 == d.target_top1);
  CHECK(q.max_ranks == d.max_ranks);
  CHECK(q.top == d.top);
  QueryParams p = base();
  p.emplace("target_top1", "0.85");
  p.emplace("max_ranks", "8");
  p.emplace("max_nodes", "2");
  p.emplace("max_epochs", "3");
  p.emplace("top", "7");
  p.emplace("device", "cuda");
  q = parse_suggest_query(p);
  CHECK(q.target_top1 == doctest::Approx(0.85));
  CHECK(q.max_ranks == 8);
  CHECK(q.max_nodes == 2);
  CHECK(q.max_epochs == 3);
  CHECK(q.top == 7);
  CHECK(q.device == "cuda");
  // An HTML form submits its empty fields: they mean "not given".
  q = parse_suggest_query(with(with(base(), "target_top1", ""), "max_ranks", ""));
  CHECK(q.target_top1 < 0);
  CHECK(q.max_ranks == d.max_ranks);
}

TEST_CASE("serve: parse_suggest_query refuses bad values naming the parameter") {
  expect_error([] { parse_suggest_query({{"data", "synthetic"}}); }, "model: missing");
  expect_error([] { parse_suggest_query({{"model", "lenet"}}); }, "data: missing");
  expect_error([] { parse_suggest_query(with(base(), "model", "nosuchnet")); },
               "model: 'nosuchnet' is not a known model");
  expect_error([] { parse_suggest_query(with(base(), "target_top1", "high")); }, "target_top1: 'high' is not");
  expect_error([] { parse_suggest_query(with(base(), "target_top1", "1.5")); }, "target_top1: '1.5' is not");
  expect_error([] { parse_suggest_query(with(base(), "target_top1", "nan")); }, "target_top1: 'nan' is not");
  expect_error([] { parse_suggest_query(with(base(), "max_ranks", "0")); }, "max_ranks: '0' is not an integer");
  expect_error([] { parse_suggest_query(with(base(), "max_ranks", "4x")); }, "max_ranks: '4x'");
  expect_error([] { parse_suggest_query(with(base(), "max_nodes", "100000")); }, "max_nodes: '100000'");
  expect_error([] { parse_suggest_query(with(base(), "top", "-1")); }, "top: '-1'");
  expect_error([] { parse_suggest_query(with(base(), "device", "tpu")); }, "device: 'tpu' is not");
  expect_error([] { parse_suggest_query(with(base(), "colour", "red")); }, "unknown parameter 'colour'");
  QueryParams twice = base();
  twice.emplace("model", "resnet20");
  expect_error([&] { parse_suggest_query(twice); }, "model: given more than once");
}

TEST_CASE("serve: html_escape and one_line") {
  CHECK(html_escape("<a href=\"x\">Tom & 'Jerry'</a>") ==
        "&lt;a href=&quot;x&quot;&gt;Tom &amp; &#39;Jerry&#39;&lt;/a&gt;");
  CHECK(one_line("a\nb\r\tc") == "a b  c");
}

TEST_CASE("serve: suggestions_json has the query and every suggestion's figures") {
  SuggestQuery q = parse_suggest_query(with(base(), "target_top1", "0.75"));
  const json j = json::parse(suggestions_json(q, {suggestion(2, 3), suggestion(1, 0)}));
  CHECK(j["query"]["model"] == "lenet");
  CHECK(j["query"]["target_top1"].get<double>() == doctest::Approx(0.75));
  REQUIRE(j["suggestions"].size() == 2);
  const json& s = j["suggestions"][0];
  CHECK(s["config"]["ranks"] == 2);
  CHECK(s["config"]["model"] == "lenet");
  CHECK(s["seconds_per_epoch"].get<double>() == doctest::Approx(2.5));
  CHECK(s["seconds_sd"].get<double>() == doctest::Approx(0.25));
  CHECK(s["epochs_to_target"] == 3);
  CHECK(s["top1_at_target"].get<double>() == doctest::Approx(0.8));
  CHECK(s["top1_sd"].get<double>() == doctest::Approx(0.03));
  CHECK(s["seconds_to_target"].get<double>() == doctest::Approx(7.5));
  CHECK(s["core_hours"].get<double>() == doctest::Approx(7.5 * 2 / 3600));
  // Not reached within the epochs predicted: the top-1 after the last one.
  CHECK(j["suggestions"][1]["top1_epoch"] == 3);
  // No target: the query says null, top-1 is after epoch 1.
  q.target_top1 = -1;
  const json k = json::parse(suggestions_json(q, {suggestion(1, 0)}));
  CHECK(k["query"]["target_top1"].is_null());
  CHECK(k["suggestions"][0]["top1_at_target"].get<double>() == doctest::Approx(0.5));
}

TEST_CASE("serve: runs_json and the suggest page escape what they show") {
  RunRecord r;
  r.name = "run<1>";
  r.status = "FINISHED";
  r.config.model = "lenet";
  r.epochs = {EpochResult{1, 2.0, 0.6, 1.0, 1.1, 0, 100}, EpochResult{2, 4.0, -1, 0.9, -1, 0, 100}};
  const json j = json::parse(runs_json({r}));
  REQUIRE(j.size() == 1);
  CHECK(j[0]["name"] == "run<1>");
  CHECK(j[0]["seconds_per_epoch"].get<double>() == doctest::Approx(3.0));
  CHECK(j[0]["final_top1"].get<double>() == doctest::Approx(0.6));

  SuggestQuery q = parse_suggest_query(with(base(), "data", "/data/<script>x"));
  std::vector<Suggestion> list = {suggestion(2, 3)};
  list[0].config.data_path = "/data/<script>x";
  SuggestPage page;
  page.model_file = "m\"odel.json";
  page.submitted = with(base(), "data", "/data/<script>x");
  page.query = &q;
  page.suggestions = &list;
  const std::string html = render_suggest_page(page);
  CHECK(html.find("<script>") == std::string::npos);
  CHECK(html.find("/data/&lt;script&gt;x") != std::string::npos);
  CHECK(html.find("m&quot;odel.json") != std::string::npos);
  CHECK(html.find("id=\"suggest-form\"") != std::string::npos);
  CHECK(html.find("<option value=\"lenet\" selected>") != std::string::npos);
  CHECK(html.find("<table id=\"suggestions\">") != std::string::npos);
  page.error = "max_ranks: '<b>' is not an integer";
  page.submitted.emplace("max_ranks", "<b>");
  page.query = nullptr;
  const std::string refused = render_suggest_page(page);
  CHECK(refused.find("max_ranks: &#39;&lt;b&gt;&#39;") != std::string::npos);
  CHECK(refused.find("name=\"max_ranks\" min=\"1\" max=\"128\" value=\"&lt;b&gt;\"") != std::string::npos);
  CHECK(refused.find("id=\"suggestions\"") == std::string::npos);
}
