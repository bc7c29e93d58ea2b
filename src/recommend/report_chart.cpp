#include "recommend/report_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <sstream>

namespace mpicnn::recommend::report_detail {

namespace {

// Plot geometry (SVG user units; the svg scales to its container's width).
constexpr double kWidth = 600, kHeight = 330;
constexpr double kLeft = 62, kRight = 18, kTop = 14, kBottom = 46;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// A tick step of 1, 2 or 5 x 10^k giving about `target` intervals over `range`.
double nice_step(double range, int target) {
  if (!(range > 0)) return 1;
  const double raw = range / target, mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

std::string tick_text(double v, double step, bool percent) {
  if (percent) v *= 100, step *= 100;
  int digits = 0;
  while (digits < 6 && std::fabs(step * std::pow(10.0, digits) - std::round(step * std::pow(10.0, digits))) > 1e-6)
    ++digits;
  std::string s = fixed(std::fabs(v) < step * 1e-6 ? 0.0 : v, digits);
  return percent ? s + "%" : s;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  void add(double v) { lo = std::min(lo, v), hi = std::max(hi, v); }
  bool empty() const { return lo > hi; }
  // Widened so that a single value or a flat line still gets a visible axis.
  void pad(bool from_zero) {
    if (empty()) lo = 0, hi = 1;
    if (from_zero) lo = std::min(lo, 0.0), hi = std::max(hi, 0.0);
    if (hi - lo < 1e-12) {
      const double d = std::max(std::fabs(hi) * 0.1, 0.5);
      lo = from_zero && lo >= 0 ? 0 : lo - d, hi += d;
    }
  }
};

struct Frame {
  Range x, y;
  double sx(double v) const { return kLeft + (v - x.lo) / (x.hi - x.lo) * (kWidth - kLeft - kRight); }
  double sy(double v) const { return kHeight - kBottom - (v - y.lo) / (y.hi - y.lo) * (kHeight - kTop - kBottom); }
};

// A small circle as a path (so every mark is a <path> with coordinates).
std::string dot(double cx, double cy, double r) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "M%.1f,%.1f a%.1f,%.1f 0 1,0 %.1f,0 a%.1f,%.1f 0 1,0 %.1f,0", cx - r, cy, r, r,
                2 * r, r, r, -2 * r);
  return buf;
}

std::string axes(const ChartSpec& spec, const Frame& f, const std::vector<double>& xs) {
  std::ostringstream o;
  const double x0 = kLeft, x1 = kWidth - kRight, y0 = kHeight - kBottom, y1 = kTop;
  const double ystep = nice_step(f.y.hi - f.y.lo, 5);
  for (double v = std::ceil(f.y.lo / ystep - 1e-9) * ystep; v <= f.y.hi + ystep * 1e-9; v += ystep) {
    const double y = f.sy(v);
    o << "<line class=\"grid\" x1=\"" << num(x0) << "\" y1=\"" << num(y) << "\" x2=\"" << num(x1) << "\" y2=\""
      << num(y) << "\"/><text class=\"tick\" x=\"" << num(x0 - 6) << "\" y=\"" << num(y + 4)
      << "\" text-anchor=\"end\">" << tick_text(v, ystep, spec.y_percent) << "</text>";
  }
  std::vector<double> xt = xs;
  if (!spec.integer_x || xt.size() > 12) {
    xt.clear();
    double step = nice_step(f.x.hi - f.x.lo, 6);
    if (spec.integer_x) step = std::max(1.0, std::round(step));
    for (double v = std::ceil(f.x.lo / step - 1e-9) * step; v <= f.x.hi + step * 1e-9; v += step) xt.push_back(v);
  }
  const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1;
  for (double v : xt) {
    o << "<line class=\"tickmark\" x1=\"" << num(f.sx(v)) << "\" y1=\"" << num(y0) << "\" x2=\"" << num(f.sx(v))
      << "\" y2=\"" << num(y0 + 5) << "\"/><text class=\"tick\" x=\"" << num(f.sx(v)) << "\" y=\"" << num(y0 + 18)
      << "\" text-anchor=\"middle\">" << (spec.integer_x ? fixed(v, 0) : tick_text(v, xstep, false)) << "</text>";
  }
  o << "<line class=\"axis\" x1=\"" << num(x0) << "\" y1=\"" << num(y0) << "\" x2=\"" << num(x1) << "\" y2=\""
    << num(y0) << "\"/><line class=\"axis\" x1=\"" << num(x0) << "\" y1=\"" << num(y0) << "\" x2=\"" << num(x0)
    << "\" y2=\"" << num(y1) << "\"/>";
  o << "<text class=\"label\" x=\"" << num((x0 + x1) / 2) << "\" y=\"" << num(kHeight - 8)
    << "\" text-anchor=\"middle\">" << html_escape(spec.x_label) << "</text>";
  o << "<text class=\"label\" transform=\"translate(14," << num((y0 + y1) / 2)
    << ") rotate(-90)\" text-anchor=\"middle\">" << html_escape(spec.y_label) << "</text>";
  return o.str();
}

std::string draw_series(const ChartSpec& spec, const Frame& f, const Series& s) {
  std::ostringstream o, d;
  o << "<g class=\"run\" data-label=\"" << html_escape(s.label) << "\"><title>" << html_escape(s.label) << "</title>";
  for (size_t i = 0; i < s.points.size(); ++i) {
    const auto [x, y] = s.points[i];
    if (i < s.y_err.size() && s.y_err[i] > 0)
      o << "<path class=\"errbar\" stroke=\"" << s.color << "\" d=\"M" << num(f.sx(x)) << ","
        << num(f.sy(y - s.y_err[i])) << " V" << num(f.sy(y + s.y_err[i])) << "\"/>";
    if (!spec.scatter) d << (i ? " L" : "M") << num(f.sx(x)) << "," << num(f.sy(y));
  }
  if (spec.scatter) {
    for (const auto& [x, y] : s.points) d << dot(f.sx(x), f.sy(y), 5) << " ";
    o << "<path class=\"series point\" fill=\"" << s.color << "\" d=\"" << d.str() << "\"/>";
  } else {
    o << "<path class=\"series\" fill=\"none\" stroke=\"" << s.color << "\""
      << (s.dashed ? " stroke-dasharray=\"6 4\"" : "") << " d=\"" << d.str() << "\"/>";
    std::string marks;
    for (const auto& [x, y] : s.points) marks += dot(f.sx(x), f.sy(y), 3) + " ";
    o << "<path class=\"marker\" fill=\"" << (s.dashed ? "#fff" : s.color) << "\" stroke=\"" << s.color
      << "\" d=\"" << marks << "\"/>";
  }
  o << "</g>";
  return o.str();
}

}  // namespace

std::string html_escape(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string palette(size_t i) {
  // Tableau 10: distinct on white and for most colour-vision deficiencies.
  static const char* const kColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                        "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  return kColors[i % 10];
}

std::string line_chart(const ChartSpec& spec, const std::vector<Series>& series) {
  Frame f;
  std::set<double> xs;
  for (const Series& s : series)
    for (size_t i = 0; i < s.points.size(); ++i) {
      const auto [x, y] = s.points[i];
      const double e = i < s.y_err.size() ? s.y_err[i] : 0;
      f.x.add(x), xs.insert(x), f.y.add(y + e), f.y.add(y - e);
    }
  if (spec.diagonal) {  // one shared range, so y = x is the 45-degree line
    Range r = f.x;
    if (!f.y.empty()) r.add(f.y.lo), r.add(f.y.hi);
    r.pad(spec.y_from_zero);
    r.hi += (r.hi - r.lo) * 0.05;
    f.x = f.y = r;
  } else {
    f.x.pad(false);
    f.y.pad(spec.y_from_zero);
    const double span = f.y.hi - f.y.lo;
    f.y.hi += span * 0.05;  // headroom so the top points are not clipped
    if (f.y.lo != 0) f.y.lo -= span * 0.05;
    if (spec.integer_x) f.x.lo -= 0.25, f.x.hi += 0.25;
  }

  std::ostringstream o;
  o << "<svg class=\"chart\" id=\"" << spec.id << "\" viewBox=\"0 0 " << num(kWidth) << " " << num(kHeight)
    << "\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\">";
  o << axes(spec, f, std::vector<double>(xs.begin(), xs.end()));
  if (spec.diagonal)
    o << "<path class=\"diagonal\" d=\"M" << num(f.sx(f.x.lo)) << "," << num(f.sy(f.x.lo)) << " L"
      << num(f.sx(f.x.hi)) << "," << num(f.sy(f.x.hi)) << "\"/>";
  for (const Series& s : series)
    if (!s.points.empty()) o << draw_series(spec, f, s);
  o << "</svg>";
  return o.str();
}

std::string bar_chart(const std::string& id, const std::string& x_label, const std::vector<std::string>& labels,
                      const std::vector<double>& values, const std::vector<std::string>& colors, bool percent) {
  // Wider than the line charts: it spans the page, and its text should match theirs in size.
  constexpr double kWidth = 1100, kBar = 18, kGap = 6, kLabel = 230, kValue = 70;
  const double height = kTop + labels.size() * (kBar + kGap) + 40;
  double hi = 0;
  for (double v : values) hi = std::max(hi, v);
  if (!(hi > 0)) hi = percent ? 0.01 : 1;
  const double step = nice_step(hi, 5);
  hi = std::ceil(hi / step - 1e-9) * step;
  const double x0 = kLabel, x1 = kWidth - kValue;
  auto sx = [&](double v) { return x0 + v / hi * (x1 - x0); };
  std::ostringstream o;
  o << "<svg class=\"chart\" id=\"" << id << "\" viewBox=\"0 0 " << num(kWidth) << " " << num(height)
    << "\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\">";
  const double bottom = height - 40;
  for (double v = 0; v <= hi + step * 1e-9; v += step)
    o << "<line class=\"grid\" x1=\"" << num(sx(v)) << "\" y1=\"" << num(kTop) << "\" x2=\"" << num(sx(v))
      << "\" y2=\"" << num(bottom) << "\"/><text class=\"tick\" x=\"" << num(sx(v)) << "\" y=\""
      << num(bottom + 16) << "\" text-anchor=\"middle\">" << tick_text(v, step, percent) << "</text>";
  for (size_t i = 0; i < labels.size(); ++i) {
    const double y = kTop + i * (kBar + kGap) + kGap / 2;
    std::string shown = labels[i].size() > 32 ? labels[i].substr(0, 31) + "\u2026" : labels[i];
    o << "<g class=\"run\" data-label=\"" << html_escape(labels[i]) << "\"><title>" << html_escape(labels[i])
      << ": " << (percent ? fixed(values[i] * 100, 2) + "%" : fixed(values[i], 3)) << "</title>";
    o << "<text class=\"tick\" x=\"" << num(x0 - 6) << "\" y=\"" << num(y + kBar / 2 + 4)
      << "\" text-anchor=\"end\">" << html_escape(shown) << "</text>";
    // A zero bar still gets a hairline so the run is visibly present.
    const double w = std::max(1.0, sx(values[i]) - x0);
    o << "<path class=\"series bar\" fill=\"" << colors[i] << "\" d=\"M" << num(x0) << "," << num(y) << " h"
      << num(w) << " v" << num(kBar) << " h" << num(-w) << " Z\"/>";
    o << "<text class=\"value\" x=\"" << num(x0 + w + 4) << "\" y=\"" << num(y + kBar / 2 + 4) << "\">"
      << (percent ? fixed(values[i] * 100, 2) + "%" : fixed(values[i], 3)) << "</text></g>";
  }
  o << "<line class=\"axis\" x1=\"" << num(x0) << "\" y1=\"" << num(kTop) << "\" x2=\"" << num(x0) << "\" y2=\""
    << num(bottom) << "\"/><text class=\"label\" x=\"" << num((x0 + x1) / 2) << "\" y=\"" << num(height - 6)
    << "\" text-anchor=\"middle\">" << html_escape(x_label) << "</text></svg>";
  return o.str();
}

std::string legend(const std::vector<Series>& series) {
  std::ostringstream o;
  o << "<ul class=\"legend\">";
  for (const Series& s : series) {
    if (s.points.empty() || s.dashed) continue;  // a dashed twin shares its solid line's entry
    o << "<li><span class=\"swatch\" style=\"background:" << s.color << "\"></span>" << html_escape(s.label) << "</li>";
  }
  o << "</ul>";
  return o.str();
}

}  // namespace mpicnn::recommend::report_detail
