// Inline SVG charts and HTML helpers for `recommend report` (report.h): line charts with
// markers, scatter plots with error bars and a y = x line, and horizontal bar charts. Every
// data line or bar is a `<path class="series" d="...">` inside `<svg class="chart" id=...>`,
// so a test can check that a chart drew something. Internal to report*.cpp.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "recommend/report.h"

namespace mpicnn::recommend::report_detail {

// Text made safe for HTML element content and quoted attribute values (& < > " '); also what
// `recommend serve` escapes its pages with.
std::string html_escape(std::string_view s);
// A number as text with `digits` decimals ("-" for a negative or missing value when
// `missing_if_negative`).
std::string fixed(double v, int digits);
// A distinct colour for series i (a 10-colour palette, repeated).
std::string palette(size_t i);

struct Series {
  std::string label;  // legend text (escaped when drawn)
  std::string color;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in this order
  std::vector<double> y_err;                      // scatter: +- error per point (optional)
  bool dashed = false;
};

struct ChartSpec {
  std::string id;                 // the svg's id: "chart-loss"
  std::string x_label, y_label;
  bool y_from_zero = true;        // include 0 on the y axis
  bool y_percent = false;         // y values are fractions shown as percent
  bool integer_x = false;         // x ticks at the integer values present (epochs, ranks)
  bool scatter = false;           // points only, no connecting line
  bool diagonal = false;          // draw y = x over the shared range (predicted vs measured)
};

// An SVG line (or scatter) chart; series with no points are left out. The legend is HTML
// (legend()), so long run names wrap instead of overflowing the plot.
std::string line_chart(const ChartSpec& spec, const std::vector<Series>& series);
// Horizontal bars, one per label, with the value written at the bar's end.
std::string bar_chart(const std::string& id, const std::string& x_label,
                      const std::vector<std::string>& labels, const std::vector<double>& values,
                      const std::vector<std::string>& colors, bool percent);
// `<ul class="legend">` with a colour swatch per series that has points.
std::string legend(const std::vector<Series>& series);

}  // namespace mpicnn::recommend::report_detail

// The report's sections (report.cpp, report_sections.cpp), each one HTML <section>.
namespace mpicnn::recommend::report_detail {
// Colour of run i in the table order: the same run has the same colour in every chart.
inline std::string run_color(size_t i) { return palette(i); }
std::string scaling_section(const std::vector<RunRecord>& runs);
std::string comm_section(const std::vector<RunRecord>& runs);
std::string predicted_section(const std::vector<RunRecord>& runs, const Recommender& recommender);
}  // namespace mpicnn::recommend::report_detail
