// The report's scaling, communication and predicted-vs-measured sections (report.h).
#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "core/check.h"
#include "recommend/report_chart.h"

namespace mpicnn::recommend::report_detail {

namespace {

// Runs that measured something: the only ones a time or share can be drawn for.
bool measured(const RunRecord& r) { return !r.epochs.empty() && r.seconds_per_epoch() > 0; }

// Everything about a configuration except its ranks (and so its nodes) and its threads per
// rank: runs with the same key differ only in how many processes trained. Threads are left
// out because the trainer's default splits the cores among the ranks (2 ranks x 1 thread
// against 1 rank x 2 threads is the same command line); scaling_groups splits a group by
// threads again when one rank count ran with several thread counts (a sweep over both).
std::string group_key(const RunConfig& c) {
  std::ostringstream o;
  o << c.model << " b" << c.batch_per_rank << ", " << c.workers << (c.workers == 1 ? " worker" : " workers")
    << (c.distribute_data ? "" : ", replicated data") << ", " << (c.dataset.empty() ? "?" : c.dataset) << " "
    << c.image_size << "px";
  if (c.device != "cpu") o << ", " << c.device;
  if (!c.data_path.empty()) o << ", " << c.data_path;
  if (!c.optimizer.empty()) o << ", " << c.optimizer << " lr " << c.learning_rate;
  if (!c.cpu_model.empty()) o << ", " << c.cpu_model;
  return o.str();
}

struct Point {
  int ranks = 0, threads = 0, runs = 0;
  double seconds = 0, images_per_s = 0;  // means over the repeated runs
  double speedup = -1, efficiency = -1;  // < 0: the group has no 1-rank run
};
struct Group {
  std::string label;
  std::vector<Point> points;  // by ranks
};

// Speedup and efficiency of each point against the group's 1-rank point, when it has one.
void add_speedups(Group& g) {
  const Point& one = g.points.front();
  if (one.ranks != 1) return;
  for (Point& p : g.points) {
    // Throughput is what ranks multiply: with replicated data an epoch is ranks x the
    // dataset, so epoch time alone would hide the gain. Runs without images/s fall back to
    // the epoch-time ratio.
    p.speedup = one.images_per_s > 0 && p.images_per_s > 0 ? p.images_per_s / one.images_per_s
                                                            : one.seconds / p.seconds;
    p.efficiency = p.speedup / p.ranks;
  }
}

std::vector<Group> scaling_groups(const std::vector<RunRecord>& runs) {
  // key -> threads per rank -> ranks -> point
  std::map<std::string, std::map<int, std::map<int, Point>>> by_key;
  for (const RunRecord& r : runs) {
    if (!measured(r)) continue;
    Point& p = by_key[group_key(r.config)][r.config.threads_per_rank][r.config.ranks];
    p.ranks = r.config.ranks, p.threads = r.config.threads_per_rank;
    p.seconds += r.seconds_per_epoch(), p.images_per_s += r.images_per_s, ++p.runs;
  }
  std::vector<Group> groups;
  for (auto& [key, by_threads] : by_key) {
    std::map<int, int> threads_at_ranks;  // how many thread counts each rank count ran with
    for (auto& [threads, by_ranks] : by_threads)
      for (auto& [ranks, p] : by_ranks) ++threads_at_ranks[ranks];
    const bool split = std::any_of(threads_at_ranks.begin(), threads_at_ranks.end(),
                                   [](const auto& kv) { return kv.second > 1; });
    std::map<int, Point> merged;
    for (auto& [threads, by_ranks] : by_threads) {
      for (auto& [ranks, p] : by_ranks) {
        p.seconds /= p.runs, p.images_per_s /= p.runs;
        merged[ranks] = p;
      }
      if (split) {
        Group g{key + ", " + std::to_string(threads) + (threads == 1 ? " thread" : " threads"), {}};
        for (auto& [ranks, p] : by_ranks) g.points.push_back(p);
        add_speedups(g);
        groups.push_back(std::move(g));
      }
    }
    if (split) continue;
    Group g{key, {}};
    for (auto& [ranks, p] : merged) g.points.push_back(p);
    add_speedups(g);
    groups.push_back(std::move(g));
  }
  return groups;
}

std::string num_td(double v, int digits, bool present = true, const char* unit = "", double scale = 1) {
  if (!present) return "<td data-v=\"\">&ndash;</td>";
  return "<td data-v=\"" + fixed(v, 6) + "\">" + fixed(v * scale, digits) + unit + "</td>";
}

std::string scaling_table(const std::vector<Group>& groups) {
  std::ostringstream o;
  o << "<div class=\"scroll\"><table class=\"sortable\" id=\"scaling-table\"><thead><tr><th class=\"text\">"
       "configuration</th><th>ranks</th><th>threads</th><th>runs</th><th>s/epoch</th><th>images/s</th><th>speedup</th>"
       "<th>effi&shy;ciency</th></tr></thead><tbody>\n";
  for (size_t g = 0; g < groups.size(); ++g)
    for (const Point& p : groups[g].points)
      o << "<tr class=\"scaling\" data-group=\"" << g << "\"><td class=\"text wrap\"><span class=\"dot\" style=\"background:"
        << palette(g) << "\"></span>" << html_escape(groups[g].label) << "</td>" << num_td(p.ranks, 0)
        << num_td(p.threads, 0) << num_td(p.runs, 0) << num_td(p.seconds, 3) << num_td(p.images_per_s, 0, p.images_per_s > 0)
        << num_td(p.speedup, 2, p.speedup >= 0, "x") << num_td(p.efficiency, 0, p.efficiency >= 0, "%", 100)
        << "</tr>\n";
  o << "</tbody></table></div>";
  return o.str();
}

std::string figure(const std::string& title, const std::string& body) {
  return "<figure><h3>" + title + "</h3>" + body + "</figure>";
}

}  // namespace

std::string scaling_section(const std::vector<RunRecord>& runs) {
  const std::vector<Group> groups = scaling_groups(runs);
  std::vector<Series> time, throughput, efficiency;
  bool any_one_rank = false;
  for (size_t g = 0; g < groups.size(); ++g) {
    Series t{groups[g].label, palette(g), {}, {}, false}, x = t, e = t;
    for (const Point& p : groups[g].points) {
      t.points.push_back({p.ranks, p.seconds});
      if (p.images_per_s > 0) x.points.push_back({p.ranks, p.images_per_s});
      if (p.efficiency >= 0) e.points.push_back({p.ranks, p.efficiency}), any_one_rank = true;
    }
    time.push_back(t), throughput.push_back(x), efficiency.push_back(e);
  }
  std::ostringstream o;
  o << "<section id=\"scaling\"><h2>Scaling with ranks</h2>";
  if (groups.empty()) {
    o << "<p class=\"note\">No run measured an epoch.</p></section>\n";
    return o.str();
  }
  o << "<div class=\"grid2\">"
    << figure("Seconds per epoch", line_chart({"chart-epoch-time", "ranks", "seconds per epoch", true, false, true}, time))
    << figure("Images per second (all ranks)",
              line_chart({"chart-throughput", "ranks", "images/s", true, false, true}, throughput));
  o << "</div><div class=\"grid2 below\">";
  if (any_one_rank)
    o << figure("Scaling efficiency (speedup / ranks)",
                line_chart({"chart-efficiency", "ranks", "efficiency", true, true, true}, efficiency));
  else
    o << "<p class=\"note\">No configuration has a 1-rank run, so no efficiency is shown.</p>";
  o << "<div>" << legend(time)
    << "<p class=\"note\">One line per configuration that differs only in its ranks (and in the threads per "
       "rank the trainer split the cores into); repeated runs are averaged. Speedup is images/s against "
       "the configuration's 1-rank run.</p>"
    << "</div></div>" << scaling_table(groups) << "</section>\n";
  return o.str();
}

std::string comm_section(const std::vector<RunRecord>& runs) {
  std::vector<std::string> labels, colors;
  std::vector<double> values;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!measured(runs[i])) continue;
    labels.push_back(runs[i].name), colors.push_back(run_color(i)), values.push_back(runs[i].comm_share);
  }
  std::ostringstream o;
  o << "<section id=\"comm\"><h2>Communication share</h2>";
  if (labels.empty())
    o << "<p class=\"note\">No run measured an epoch.</p>";
  else
    o << bar_chart("chart-comm", "share of step time in gradient communication", labels, values, colors, true)
      << "<p class=\"note\">1-rank runs communicate nothing; a large share means the ranks wait on "
         "the all-reduce more than they compute.</p>";
  o << "</section>\n";
  return o.str();
}

std::string predicted_section(const std::vector<RunRecord>& runs, const Recommender& recommender) {
  std::vector<Series> points;
  std::ostringstream rows, skipped;
  double abs_err = 0;
  int n = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunRecord& r = runs[i];
    if (!measured(r)) continue;
    Prediction p;
    try {
      p = recommender.predict(r.config, int(r.epochs.size()));
    } catch (const Error& e) {  // e.g. a model the recommender has no facts for: say so, go on
      skipped << "<li>" << html_escape(r.name) << ": " << html_escape(e.message()) << "</li>";
      continue;
    }
    const double measured_s = r.seconds_per_epoch();
    points.push_back({r.name, run_color(i), {{measured_s, p.seconds_per_epoch}}, {p.seconds_sd}, false});
    abs_err += std::fabs(p.seconds_per_epoch - measured_s), ++n;
    const double top1 = p.top1.empty() ? -1 : p.top1.back();
    rows << "<tr class=\"prediction\" data-run=\"" << html_escape(r.name) << "\"><td class=\"text\"><span class=\"dot\" style=\"background:"
         << run_color(i) << "\"></span>" << html_escape(r.name) << "</td>" << num_td(measured_s, 3) << num_td(p.seconds_per_epoch, 3)
         << num_td(p.seconds_sd, 3) << num_td((p.seconds_per_epoch - measured_s) / measured_s, 1, true, "%", 100)
         << num_td(r.final_top1(), 1, r.final_top1() >= 0, "%", 100) << num_td(top1, 1, top1 >= 0, "%", 100)
         << "</tr>\n";
  }
  std::ostringstream o;
  o << "<section id=\"predicted\"><h2>Predicted vs measured seconds per epoch</h2>";
  if (n == 0) {
    o << "<p class=\"note\">The recommender predicted none of the measured runs.</p>";
  } else {
    o << "<div class=\"grid2\">"
      << figure("Predicted against measured (dashed: y = x; bars: the ensemble's spread)",
                line_chart({"chart-predicted", "measured s/epoch", "predicted s/epoch", true, false, false, true, true},
                           points))
      << "<div><p class=\"note\">Mean absolute error over " << n << (n == 1 ? " run: " : " runs: ")
      << fixed(abs_err / n, 3)
      << " s per epoch. Runs the recommender was fitted on are predicted in-sample, so for them this "
         "understates its error on new configurations: <code>recommend fit</code> prints the "
         "cross-validated error.</p><div class=\"scroll\"><table class=\"sortable\" "
         "id=\"predicted-table\"><thead><tr><th class=\"text\">run</th><th>measured s</th><th>predicted s</th>"
         "<th>spread</th><th>error</th><th>measured top&#8209;1</th><th>predicted top&#8209;1</th></tr></thead><tbody>\n"
      << rows.str() << "</tbody></table></div></div></div>";
  }
  if (!skipped.str().empty()) o << "<p class=\"note\">Not predicted:</p><ul class=\"note\">" << skipped.str() << "</ul>";
  o << "</section>\n";
  return o.str();
}

}  // namespace mpicnn::recommend::report_detail
