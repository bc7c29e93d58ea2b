// `recommend report`: the command line, the page around the sections, the runs table and the
// per-epoch curves. The scaling, communication and predicted-vs-measured sections are in
// report_sections.cpp; the SVG drawing in report_chart.cpp.
#include "recommend/report.h"

#include <cstring>
#include <ctime>
#include <iostream>
#include <set>
#include <sstream>

#include "core/check.h"
#include "io/atomic_file.h"
#include "recommend/commands.h"
#include "recommend/report_chart.h"

namespace mpicnn::recommend {

using namespace report_detail;

namespace {

constexpr const char* kUsage = R"(Usage: ./recommend report RUNS... -o FILE [-r MODEL] [--title TEXT]

Writes one self-contained HTML file (inline CSS, SVG and script; opens offline in any browser)
comparing the runs: a sortable table of configurations and results (failed sweep points
included, with their error), loss and top-1 per epoch, seconds per epoch and images/s against
ranks with the scaling efficiency of otherwise-identical configurations, the share of step
time spent in gradient communication, and, with -r, the recommender's predicted seconds per
epoch against the measured ones.

  RUNS                 run directories (./train -s DIR) or folders of them (a sweep's -o DIR)
  -o, --output FILE    the HTML file to write (replaced atomically)
  -r, --recommender M  a model from `recommend fit`: adds predicted vs measured
  --title TEXT         the page title (default "mpicnn runs")
  -h, --help           this help

Example: ./recommend report runs/sweep1 runs/baseline -o report.html -r model.json
)";

constexpr const char* kStyle = R"(
:root{--fg:#1d2329;--muted:#5f6b76;--line:#dde2e7;--bg:#f5f7f9;--card:#fff;--ok:#2f7d32;--bad:#c62828;--warn:#b26a00}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
main{max-width:1240px;margin:0 auto;padding:20px 24px 40px}
h1{font-size:24px;margin:4px 0 2px}h2{font-size:18px;margin:0 0 10px}h3{font-size:14px;margin:0 0 6px;color:var(--muted);font-weight:600}
.sub{color:var(--muted);margin:0 0 16px}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:16px 18px;margin:0 0 18px}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:0 0 18px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 14px;min-width:150px}
.card b{display:block;font-size:20px}.card span{color:var(--muted);font-size:12px}
.grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:18px}
.below{margin-top:18px}
figure{margin:0}figcaption{color:var(--muted);font-size:12px;margin-top:4px}
svg.chart{width:100%;height:auto;display:block}
svg .grid{stroke:#eceff2}svg .axis{stroke:#8a949e}svg .tickmark{stroke:#8a949e}
svg .tick{font-size:11px;fill:#5f6b76}svg .label{font-size:12px;fill:#38424c}svg .value{font-size:11px;fill:#38424c}
svg path.series{stroke-width:2.2;stroke-linejoin:round;stroke-linecap:round}
svg path.series.point{stroke:#fff;stroke-width:1}svg path.errbar{stroke-width:1.5}
svg path.marker{stroke-width:1.5}svg path.diagonal{stroke:#9aa3ab;stroke-dasharray:5 4;fill:none}
svg g.run:hover path.series{stroke-width:3.5}
ul.legend{list-style:none;padding:0;margin:6px 0 0;display:flex;flex-wrap:wrap;gap:2px 14px;font-size:12px}
.swatch{display:inline-block;width:14px;height:4px;border-radius:2px;margin-right:5px;vertical-align:middle}
.scroll{overflow-x:auto}
table{border-collapse:collapse;width:100%;font-size:12px}
th,td{padding:4px 6px;border-bottom:1px solid var(--line);text-align:right;white-space:nowrap}
th{background:#eef1f4;cursor:pointer;user-select:none;font-weight:600;white-space:normal;vertical-align:bottom}
th:hover{background:#e2e7ec}th[aria-sort=ascending]::after{content:" \25B2"}th[aria-sort=descending]::after{content:" \25BC"}
td.text,th.text{text-align:left}td.wrap{white-space:normal;min-width:150px}#scaling-table{margin-top:14px}tr:hover td{background:#f7f9fb}
.status{font-weight:600;font-size:11px;padding:1px 6px;border-radius:9px;background:#e8f2e8;color:var(--ok)}
.status.FAILED{background:#fbe9e9;color:var(--bad)}.status.RUNNING,.status.KILLED{background:#fff3e0;color:var(--warn)}
.error{color:var(--bad);font-size:11.5px;white-space:normal;min-width:120px;max-width:280px;display:block}
.note{color:var(--muted);font-size:12.5px;margin:8px 0 0}
.dot{display:inline-block;width:9px;height:9px;border-radius:50%;margin-right:6px}
)";

// Sorts a table.sortable by the clicked column: numbers by their data-v, text otherwise;
// cells with no value stay last in both directions.
constexpr const char* kScript = R"(
document.querySelectorAll('table.sortable').forEach(function (t) {
  var heads = t.tHead.rows[0].cells;
  Array.prototype.forEach.call(heads, function (th, i) {
    th.addEventListener('click', function () {
      var asc = th.getAttribute('aria-sort') !== 'ascending';
      Array.prototype.forEach.call(heads, function (h) { h.removeAttribute('aria-sort'); });
      th.setAttribute('aria-sort', asc ? 'ascending' : 'descending');
      var body = t.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      var key = function (r) {
        var c = r.cells[i], v = c.getAttribute('data-v');
        if (v === null) return c.textContent.trim().toLowerCase();
        return v === '' ? null : parseFloat(v);
      };
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        if (x === null || y === null) return (x === null) - (y === null);
        var c = typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y));
        return asc ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
)";

std::string text_cell(const std::string& s) { return "<td class=\"text\">" + html_escape(s) + "</td>"; }
// A numeric cell sorted by its value; "-" (sorted last) when the value is missing.
std::string num_cell(double v, int digits, bool present = true, double scale = 1, const char* unit = "") {
  if (!present) return "<td data-v=\"\">&ndash;</td>";
  return "<td data-v=\"" + fixed(v, 6) + "\">" + fixed(v * scale, digits) + unit + "</td>";
}

// The test loss after the last evaluated epoch (< 0: none); train losses are in the curves.
double last_loss(const RunRecord& r) {
  for (auto it = r.epochs.rbegin(); it != r.epochs.rend(); ++it)
    if (it->test_loss >= 0) return it->test_loss;
  return -1;
}

std::string run_row(const RunRecord& r, size_t index) {
  const RunConfig& c = r.config;
  const bool ran = !r.epochs.empty();
  std::ostringstream o;
  o << "<tr class=\"run\" data-run=\"" << html_escape(r.name) << "\" data-status=\"" << html_escape(r.status) << "\">";
  o << "<td class=\"text\" title=\"" << html_escape(r.dir) << "\"><span class=\"dot\" style=\"background:"
    << run_color(index) << "\"></span>" << html_escape(r.name) << "</td>";
  o << "<td class=\"text\"><span class=\"status " << html_escape(r.status) << "\">" << html_escape(r.status)
    << "</span>";
  if (!r.error.empty()) o << "<span class=\"error\">" << html_escape(r.error) << "</span>";
  o << "</td>" << text_cell(c.model) << text_cell(c.dataset + (c.device == "cpu" ? "" : " (" + c.device + ")"));
  o << num_cell(c.image_size, 0, c.image_size > 0) << num_cell(c.ranks, 0) << num_cell(c.threads_per_rank, 0)
    << num_cell(c.workers, 0) << num_cell(c.batch_per_rank, 0, c.batch_per_rank > 0)
    << num_cell(c.global_batch(), 0, c.batch_per_rank > 0) << text_cell(c.distribute_data ? "yes" : "no")
    << num_cell(double(r.epochs.size()), 0) << num_cell(r.seconds_per_epoch(), 3, ran)
    << num_cell(r.images_per_s, 0, ran && r.images_per_s > 0) << num_cell(r.comm_share, 1, ran, 100, "%")
    << num_cell(r.final_top1(), 1, r.final_top1() >= 0, 100, "%") << num_cell(last_loss(r), 4, last_loss(r) >= 0)
    << "</tr>\n";
  return o.str();
}

std::string runs_table(const std::vector<RunRecord>& runs) {
  static const char* const kHeads[] = {"run", "status", "model", "dataset", "image", "ranks", "threads",
                                       "workers", "batch per rank", "global batch", "dist. data", "epochs",
                                       "s/epoch", "images/s", "comm share", "final top&#8209;1", "test loss"};
  std::ostringstream o;
  o << "<section id=\"runs\"><h2>Configurations and results</h2><div class=\"scroll\">"
    << "<table class=\"sortable\" id=\"runs-table\"><thead><tr>";
  for (size_t i = 0; i < std::size(kHeads); ++i)
    o << "<th" << (i < 4 || i == 10 ? " class=\"text\"" : "") << ">" << kHeads[i] << "</th>";
  o << "</tr></thead><tbody>\n";
  for (size_t i = 0; i < runs.size(); ++i) o << run_row(runs[i], i);
  o << "</tbody></table></div><p class=\"note\">Click a heading to sort. s/epoch is the mean over the epochs "
       "done; images/s counts all ranks; comm share is the fraction of step time spent in gradient "
       "communication; top-1 and test loss are after the last epoch.</p></section>\n";
  return o.str();
}

std::string figure(const std::string& title, const std::string& chart, const std::string& caption) {
  return "<figure><h3>" + title + "</h3>" + chart + caption + "</figure>";
}

std::string curves_section(const std::vector<RunRecord>& runs) {
  std::vector<Series> loss, top1;
  for (size_t i = 0; i < runs.size(); ++i) {
    Series train{runs[i].name, run_color(i), {}, {}, false}, test{runs[i].name, run_color(i), {}, {}, true},
        acc{runs[i].name, run_color(i), {}, {}, false};
    for (const EpochResult& e : runs[i].epochs) {
      if (e.train_loss >= 0) train.points.push_back({e.epoch, e.train_loss});
      if (e.test_loss >= 0) test.points.push_back({e.epoch, e.test_loss});
      if (e.top1 >= 0) acc.points.push_back({e.epoch, e.top1});
    }
    // A run with only a test loss still gets a legend entry.
    if (train.points.empty()) test.dashed = false;
    loss.push_back(train), loss.push_back(test), top1.push_back(acc);
  }
  ChartSpec ls{"chart-loss", "epoch", "loss", false, false, true};
  ChartSpec as{"chart-top1", "epoch", "test top-1", true, true, true};
  std::ostringstream o;
  o << "<section id=\"curves\"><h2>Loss and accuracy per epoch</h2><div class=\"grid2\">"
    << figure("Loss (solid: train, dashed: test)", line_chart(ls, loss), legend(loss))
    << figure("Test top-1", line_chart(as, top1), legend(top1)) << "</div></section>\n";
  return o.str();
}

std::string summary_cards(const std::vector<RunRecord>& runs) {
  size_t finished = 0, failed = 0;
  const RunRecord *fastest = nullptr, *best = nullptr;
  std::set<std::string> cpus;
  for (const RunRecord& r : runs) {
    finished += r.finished(), failed += r.status == "FAILED";
    if (!r.config.cpu_model.empty())
      cpus.insert(r.config.cpu_model + (r.config.cpus_per_node ? " (" + std::to_string(r.config.cpus_per_node) + " cores)" : ""));
    if (r.epochs.empty()) continue;
    if (!fastest || r.seconds_per_epoch() < fastest->seconds_per_epoch()) fastest = &r;
    if (r.final_top1() >= 0 && (!best || r.final_top1() > best->final_top1())) best = &r;
  }
  auto card = [](const std::string& value, const std::string& what) {
    return "<div class=\"card\"><b>" + value + "</b><span>" + what + "</span></div>";
  };
  std::string hw;
  for (const std::string& c : cpus) hw += (hw.empty() ? "" : ", ") + c;
  std::ostringstream o;
  o << "<div class=\"cards\" id=\"summary\">" << card(std::to_string(runs.size()), "runs")
    << card(std::to_string(finished), "finished") << card(std::to_string(failed), "failed");
  if (fastest)
    o << card(fixed(fastest->seconds_per_epoch(), 3) + " s", "fastest epoch: " + html_escape(fastest->name));
  if (best) o << card(fixed(best->final_top1() * 100, 1) + "%", "best top-1: " + html_escape(best->name));
  if (!hw.empty()) o << card(html_escape(hw), "hardware");
  o << "</div>\n";
  return o.str();
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

}  // namespace

std::string render_report(const std::vector<RunRecord>& runs, const ReportOptions& options) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
    << "<title>" << html_escape(options.title) << "</title><style>" << kStyle << "</style></head>\n<body><main>"
    << "<h1>" << html_escape(options.title) << "</h1><p class=\"sub\">" << runs.size()
    << (runs.size() == 1 ? " run" : " runs") << " compared by mpicnn <code>recommend report</code>, " << utc_now()
    << "</p>\n";
  o << summary_cards(runs) << runs_table(runs) << curves_section(runs) << scaling_section(runs)
    << comm_section(runs);
  if (options.recommender) o << predicted_section(runs, *options.recommender);
  o << "</main><script>" << kScript << "</script></body></html>\n";
  return o.str();
}

int report_main(int argc, char** argv) {
  std::vector<std::string> paths;
  std::string output, model;
  ReportOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> std::string {
      CHECK(i + 1 < argc, flag, " needs a value (-h for help)");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    } else if (a == "-o" || a == "--output") {
      output = value("-o");
    } else if (a == "-r" || a == "--recommender") {
      model = value("-r");
    } else if (a == "--title") {
      options.title = value("--title");
    } else if (a.size() > 1 && a[0] == '-') {
      FAIL("unknown option ", a, " (-h for help)");
    } else {
      paths.push_back(a);
    }
  }
  CHECK(!output.empty(), "-o FILE is required: where to write the HTML report (-h for help)");
  CHECK(!paths.empty(), "give run directories or folders of them (-h for help)");
  const std::vector<RunRecord> runs = load_runs(paths);
  CHECK(!runs.empty(), "no runs found under the given paths");
  Recommender recommender;
  if (!model.empty()) {
    recommender = Recommender::load(model);
    options.recommender = &recommender;
  }
  const std::string html = render_report(runs, options);
  write_file_atomic(output, {reinterpret_cast<const uint8_t*>(html.data()), html.size()});
  std::cout << "report: " << runs.size() << (runs.size() == 1 ? " run" : " runs") << " -> " << output << "\n";
  return 0;
}

}  // namespace mpicnn::recommend
