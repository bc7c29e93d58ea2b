// `recommend serve`'s query parsing, JSON and the /suggest page (serve.h). No sockets here.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "core/check.h"
#include "core/cli.h"
#include "models/registry.h"
#include "recommend/report_chart.h"  // html_escape
#include "recommend/serve.h"

using nlohmann::json;

namespace mpicnn::recommend {

using report_detail::html_escape;

namespace {

// Upper bounds keep one request's candidate grid and answer small: the server is shared.
constexpr int kMaxRanks = 128, kMaxNodes = 16, kMaxEpochs = 100, kMaxTop = 50;
const std::vector<std::string> kParams = {"model", "data",       "target_top1", "max_ranks",
                                          "max_nodes", "max_epochs", "top",         "device"};

std::string model_names() {
  std::string s;
  for (const ModelSpec& m : model_specs()) s += (s.empty() ? "" : ", ") + m.name;
  return s;
}

double at(const std::vector<double>& v, int epoch) {
  return epoch >= 1 && epoch <= int(v.size()) ? v[epoch - 1] : NAN;
}
json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json config_json(const RunConfig& c) {
  return {{"model", c.model},
          {"dataset", c.dataset},
          {"data_path", c.data_path},
          {"device", c.device},
          {"ranks", c.ranks},
          {"nodes", c.nodes},
          {"threads_per_rank", c.threads_per_rank},
          {"workers", c.workers},
          {"batch_per_rank", c.batch_per_rank},
          {"global_batch", c.global_batch()},
          {"distribute_data", c.distribute_data},
          {"image_size", c.image_size},
          {"cores", c.cores()},
          {"summary", c.describe()}};
}

std::string fixed(double v, int digits) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

SuggestQuery parse_suggest_query(const QueryParams& params) {
  std::set<std::string> seen;
  for (const auto& [name, value] : params) {
    if (std::find(kParams.begin(), kParams.end(), name) == kParams.end()) {
      std::string list;
      for (const std::string& p : kParams) list += (list.empty() ? "" : ", ") + p;
      FAIL("unknown parameter '", name, "' (accepted: ", list, ")");
    }
    CHECK(seen.insert(name).second, name, ": given more than once");
  }
  auto value = [&](const char* name) {
    const auto it = params.find(name);
    return it == params.end() ? std::string() : it->second;
  };
  SuggestQuery q;
  q.model = value("model");
  CHECK(!q.model.empty(), "model: missing (one of ", model_names(), ")");
  bool known = false;
  for (const ModelSpec& m : model_specs()) known = known || m.name == q.model;
  CHECK(known, "model: '", q.model, "' is not a known model (one of ", model_names(), ")");
  q.data = value("data");
  CHECK(!q.data.empty(), "data: missing (a dataset kind such as synthetic or fashion-mnist, or a path)");
  // Each optional number: empty keeps the default; the label names the URL parameter.
  auto int_param = [&](const char* name, int& field, int hi) {
    const std::string v = value(name);
    if (!v.empty()) field = int(cli::to_int(cli::Given{v, name}, 1, hi));
  };
  int_param("max_ranks", q.max_ranks, kMaxRanks);
  int_param("max_nodes", q.max_nodes, kMaxNodes);
  int_param("max_epochs", q.max_epochs, kMaxEpochs);
  int_param("top", q.top, kMaxTop);
  if (const std::string t = value("target_top1"); !t.empty())
    q.target_top1 = cli::to_double(cli::Given{t, "target_top1"}, [](double x) { return x >= 0 && x <= 1; },
                                   "a fraction from 0 to 1 (empty: rank by time per epoch)");
  if (const std::string d = value("device"); !d.empty())
    q.device = cli::to_choice(cli::Given{d, "device"}, {"cpu", "cuda"});
  return q;
}

std::string one_line(std::string_view text) {
  std::string out(text);
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  return out;
}

std::string suggestions_json(const SuggestQuery& q, const std::vector<Suggestion>& suggestions) {
  json list = json::array();
  for (const Suggestion& s : suggestions) {
    const int e = top1_epoch(q, s);
    list.push_back({{"config", config_json(s.config)},
                    {"seconds_per_epoch", number(s.prediction.seconds_per_epoch)},
                    {"seconds_sd", number(s.prediction.seconds_sd)},
                    {"epochs_to_target", s.epochs_to_target},
                    {"top1_epoch", e == 0 ? json(nullptr) : json(e)},
                    {"top1_at_target", number(at(s.prediction.top1, e))},
                    {"top1_sd", number(at(s.prediction.top1_sd, e))},
                    {"seconds_to_target", number(s.seconds_to_target)},
                    {"core_hours", number(s.core_hours)}});
  }
  const json query = {{"model", q.model},
                      {"data", q.data},
                      {"target_top1", q.target_top1 < 0 ? json(nullptr) : json(q.target_top1)},
                      {"max_ranks", q.max_ranks},
                      {"max_nodes", q.max_nodes},
                      {"max_epochs", q.max_epochs},
                      {"top", q.top},
                      {"device", q.device}};
  return json{{"query", query}, {"suggestions", list}}.dump(1) + "\n";
}

std::string runs_json(const std::vector<RunRecord>& runs) {
  json list = json::array();
  for (const RunRecord& r : runs) {
    const double top1 = r.final_top1();
    list.push_back({{"name", r.name},
                    {"dir", r.dir},
                    {"status", r.status},
                    {"error", r.error},
                    {"config", config_json(r.config)},
                    {"summary", r.config.describe()},
                    {"epochs", r.epochs.size()},
                    {"seconds_per_epoch", r.epochs.empty() ? json(nullptr) : number(r.seconds_per_epoch())},
                    {"final_top1", top1 < 0 ? json(nullptr) : number(top1)},
                    {"images_per_s", number(r.images_per_s)}});
  }
  return list.dump(1) + "\n";
}

namespace {

constexpr const char* kStyle =
    "body{font-family:sans-serif;margin:2em;max-width:72em}label{display:inline-block;margin:0 "
    "1.5em .6em 0}table{border-collapse:collapse;margin-top:1em}td,th{border:1px solid #bbb;"
    "padding:.25em .6em;text-align:right}td.c,th.c{text-align:left}.error{color:#b00020;"
    "font-weight:bold}";

std::string number_input(const char* name, const char* label, const std::string& value, int lo,
                         int hi) {
  return "<label>" + std::string(label) + " <input type=\"number\" name=\"" + name + "\" min=\"" +
         std::to_string(lo) + "\" max=\"" + std::to_string(hi) + "\" value=\"" + html_escape(value) +
         "\"></label>\n";
}

// The form shows what was submitted, refused or not (the user corrects one field), else the
// defaults.
std::string render_form(const QueryParams& submitted) {
  const SuggestQuery d;
  auto val = [&](const char* name, const std::string& fallback) {
    const auto it = submitted.find(name);
    return it == submitted.end() ? fallback : it->second;
  };
  const std::string model = val("model", ""), device = val("device", d.device);
  std::string h = "<form id=\"suggest-form\" method=\"get\" action=\"/suggest\">\n<label>model <select name=\"model\">";
  for (const ModelSpec& m : model_specs())
    h += "<option value=\"" + html_escape(m.name) + "\"" + (m.name == model ? " selected" : "") + ">" +
         html_escape(m.name) + "</option>";
  h += "</select></label>\n<label>data <input name=\"data\" list=\"datasets\" required value=\"" +
       html_escape(val("data", "synthetic")) +
       "\"></label><datalist id=\"datasets\"><option value=\"synthetic\"><option "
       "value=\"fashion-mnist\"></datalist>\n";
  h += "<label>target top-1 <input type=\"number\" name=\"target_top1\" min=\"0\" max=\"1\" "
       "step=\"any\" placeholder=\"none: fastest epoch\" value=\"" +
       html_escape(val("target_top1", "")) + "\"></label>\n";
  h += number_input("max_ranks", "max ranks", val("max_ranks", std::to_string(d.max_ranks)), 1, kMaxRanks);
  h += number_input("max_nodes", "max nodes", val("max_nodes", std::to_string(d.max_nodes)), 1, kMaxNodes);
  h += number_input("max_epochs", "max epochs", val("max_epochs", std::to_string(d.max_epochs)), 1, kMaxEpochs);
  h += number_input("top", "suggestions", val("top", std::to_string(d.top)), 1, kMaxTop);
  h += "<label>device <select name=\"device\">";
  for (const char* dev : {"cpu", "cuda"})
    h += std::string("<option") + (device == dev ? " selected" : "") + ">" + dev + "</option>";
  return h + "</select></label>\n<button type=\"submit\">Suggest</button>\n</form>\n";
}

std::string render_table(const SuggestQuery& q, const std::vector<Suggestion>& suggestions) {
  if (suggestions.empty()) return "<p id=\"no-suggestions\">No configuration fits this query.</p>\n";
  std::string h =
      "<table id=\"suggestions\">\n<tr><th>#</th><th class=\"c\">configuration</th><th>cores</th>"
      "<th>s/epoch</th><th>&plusmn;</th><th>epochs to target</th><th>top-1 (epoch)</th>"
      "<th>&plusmn;</th><th>s to target</th><th>core-hours</th></tr>\n";
  int i = 0;
  for (const Suggestion& s : suggestions) {
    const int e = top1_epoch(q, s);
    const double t1 = at(s.prediction.top1, e), sd = at(s.prediction.top1_sd, e);
    h += "<tr><td>" + std::to_string(++i) + "</td><td class=\"c\">" + html_escape(s.config.describe()) +
         "</td><td>" + std::to_string(s.config.cores()) + "</td><td>" +
         fixed(s.prediction.seconds_per_epoch, 2) + "</td><td>" + fixed(s.prediction.seconds_sd, 2) +
         "</td><td>" + (s.epochs_to_target > 0 ? std::to_string(s.epochs_to_target) : "-") + "</td><td>" +
         (std::isfinite(t1) ? fixed(100 * t1, 1) + "% (" + std::to_string(e) + ")" : "-") + "</td><td>" +
         (std::isfinite(sd) ? fixed(100 * sd, 1) : "-") + "</td><td>" + fixed(s.seconds_to_target, 1) +
         "</td><td>" + fixed(s.core_hours, 4) + "</td></tr>\n";
  }
  return h + "</table>\n";
}

}  // namespace

std::string render_suggest_page(const SuggestPage& page) {
  std::string h =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>mpicnn: which "
      "configuration?</title><style>" +
      std::string(kStyle) +
      "</style></head>\n<body>\n<h1>Which configuration should I use?</h1>\n<p><a href=\"/\">runs "
      "report</a> &middot; recommender: <code>" +
      html_escape(page.model_file) +
      "</code> &middot; <a href=\"/api/runs\">runs as JSON</a></p>\n<p>Predicted seconds per epoch and "
      "top-1 per epoch for the candidate configurations, ranked by time to the target top-1 (then "
      "core-hours); &plusmn; is the spread of the model's predictions.</p>\n";
  if (!page.error.empty())
    h += "<p class=\"error\" id=\"error\">" + html_escape(one_line(page.error)) + "</p>\n";
  h += render_form(page.submitted);
  if (page.query && page.suggestions) h += render_table(*page.query, *page.suggestions);
  return h + "</body></html>\n";
}

}  // namespace mpicnn::recommend
