#include "train/metrics_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>

namespace lt {

namespace {

constexpr double kWidth = 720, kPanelHeight = 220, kLeft = 70, kRight = 20, kTop = 30, kGap = 50;

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, std::fabs(v) >= 1e-2 && std::fabs(v) < 1e4 ? "%.4g" : "%.2e", v);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

// One panel: frame, min/max labels on both axes, and the series as a polyline (non-finite
// values, such as a skipped step's loss, break the line rather than bend it).
void panel(std::ostringstream& svg, const std::vector<MetricPoint>& pts, double top, const std::string& label,
           const std::string& color, const std::function<double(const MetricPoint&)>& value) {
  const double x0 = kLeft, x1 = kWidth - kRight, y0 = top, y1 = top + kPanelHeight;
  svg << "<rect x='" << x0 << "' y='" << y0 << "' width='" << x1 - x0 << "' height='" << kPanelHeight
      << "' fill='none' stroke='#888'/>\n";
  svg << "<text x='" << x0 << "' y='" << y0 - 8 << "' font-size='13'>" << escape(label) << "</text>\n";
  double lo = INFINITY, hi = -INFINITY;
  for (const MetricPoint& p : pts)
    if (std::isfinite(value(p))) lo = std::min(lo, value(p)), hi = std::max(hi, value(p));
  if (!(lo <= hi)) {
    svg << "<text x='" << (x0 + x1) / 2 << "' y='" << (y0 + y1) / 2
        << "' text-anchor='middle' font-size='12'>no steps logged</text>\n";
    return;
  }
  if (hi == lo) hi = lo + (lo == 0 ? 1 : std::fabs(lo) * 0.01);
  const double s_lo = static_cast<double>(pts.front().step), s_hi = std::max(s_lo + 1, double(pts.back().step));
  auto px = [&](double s) { return x0 + (s - s_lo) / (s_hi - s_lo) * (x1 - x0); };
  auto py = [&](double v) { return y1 - (v - lo) / (hi - lo) * (y1 - y0); };
  svg << "<text x='" << x0 - 6 << "' y='" << y0 + 10 << "' text-anchor='end' font-size='11'>" << number(hi)
      << "</text>\n<text x='" << x0 - 6 << "' y='" << y1 << "' text-anchor='end' font-size='11'>" << number(lo)
      << "</text>\n";
  svg << "<text x='" << x0 << "' y='" << y1 + 15 << "' font-size='11'>step " << pts.front().step
      << "</text>\n<text x='" << x1 << "' y='" << y1 + 15 << "' text-anchor='end' font-size='11'>step "
      << pts.back().step << "</text>\n";
  bool open = false;
  for (const MetricPoint& p : pts) {
    const double v = value(p);
    if (!std::isfinite(v)) {
      if (open) svg << "'/>\n";
      open = false;
      continue;
    }
    if (!open) svg << "<polyline fill='none' stroke='" << color << "' stroke-width='1.5' points='";
    open = true;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f,%.1f ", px(static_cast<double>(p.step)), py(v));
    svg << buf;
  }
  if (open) svg << "'/>\n";
}

}  // namespace

std::string loss_lr_svg(const std::vector<MetricPoint>& points, const std::string& title) {
  std::vector<MetricPoint> pts = points;
  std::stable_sort(pts.begin(), pts.end(), [](const MetricPoint& a, const MetricPoint& b) { return a.step < b.step; });
  const double height = kTop + 2 * kPanelHeight + kGap + 30;
  std::ostringstream svg;
  svg << "<?xml version='1.0' encoding='UTF-8'?>\n<svg xmlns='http://www.w3.org/2000/svg' width='" << kWidth
      << "' height='" << height << "' font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n";
  svg << "<text x='" << kWidth / 2 << "' y='16' text-anchor='middle' font-size='14'>" << escape(title) << "</text>\n";
  panel(svg, pts, kTop + 10, "training loss", "#1f77b4", [](const MetricPoint& p) { return p.loss; });
  panel(svg, pts, kTop + 10 + kPanelHeight + kGap, "learning rate", "#d62728", [](const MetricPoint& p) { return p.lr; });
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace lt
