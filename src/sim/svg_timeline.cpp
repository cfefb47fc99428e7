#include "sim/svg_timeline.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <tuple>

#include "core/error.h"

namespace lt {
namespace {

constexpr double kWidth = 1400, kLeft = 90, kRow = 26, kTop = 40;
constexpr const char* kGpu = "#4c78a8";
constexpr const char* kCpu = "#f58518";
constexpr const char* kNvme = "#54a24b";
constexpr const char* kRecompute = "#bab0ac";

const char* color(const SimEvent& e) {
  switch (e.lane) {
    case SimLane::Compute:
      if (e.name.rfind("RC", 0) == 0) return kRecompute;
      if (e.name.rfind("B", 0) == 0) return "#e45756";
      if (e.name == "HEAD") return "#b279a2";
      return kGpu;
    case SimLane::H2D: return e.name.rfind("w.", 0) == 0 ? "#72b7b2" : kCpu;
    case SimLane::D2H: return e.name.rfind("g.", 0) == 0 ? "#9d755d" : kCpu;
    case SimLane::Nvme: return kNvme;
    case SimLane::Host: return "#eeca3b";
    case SimLane::Net: return "#4c78a8";
  }
  return "#000";
}

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else o += c;
  }
  return o;
}

}  // namespace

std::string svg_timeline(const SimResult& r, const Plan& p) {
  std::ostringstream s;
  const double span = std::max(r.step_s, 1e-12);
  const double plot_w = kWidth - kLeft - 20;
  auto X = [&](double t) { return kLeft + t / span * plot_w; };
  const double mem_top = kTop + 6 * kRow + 10, mem_h = 80;
  const double map_top = mem_top + mem_h + 40, map_h = 30;
  const double height = map_top + map_h + 50;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
                "font-size=\"11\">\n",
                kWidth, height);
  s << buf;
  std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"20\" font-size=\"14\">%s: %s, batch %lld, seq %lld, step %.4f s</text>\n",
                kLeft, esc(p.policy).c_str(), esc(p.model_name).c_str(), static_cast<long long>(p.batch),
                static_cast<long long>(p.seq), r.step_s);
  s << buf;
  for (SimLane l : {SimLane::Compute, SimLane::H2D, SimLane::D2H, SimLane::Nvme, SimLane::Host, SimLane::Net}) {
    double y = kTop + static_cast<int>(l) * kRow;
    std::snprintf(buf, sizeof buf, "<text x=\"5\" y=\"%.1f\">%s</text>\n", y + kRow * 0.65, sim_lane_name(l));
    s << buf;
  }
  for (const auto& e : r.events) {
    double y = kTop + static_cast<int>(e.lane) * kRow + 2;
    double w = std::max(0.5, X(e.end) - X(e.start));
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" stroke=\"#fff\" "
                  "stroke-width=\"0.3\"><title>%s (%s) %.6f-%.6f s</title></rect>\n",
                  X(e.start), y, w, kRow - 4, color(e), esc(e.name).c_str(), esc(e.window).c_str(), e.start, e.end);
    s << buf;
  }
  // Compute-tier bytes.
  double peak = std::max(1.0, std::max(r.peak.gpu, p.gpu_cap_bytes));
  std::snprintf(buf, sizeof buf, "<text x=\"5\" y=\"%.1f\">GPU bytes</text>\n", mem_top + 15);
  s << buf;
  s << "<polyline fill=\"none\" stroke=\"#4c78a8\" stroke-width=\"1\" points=\"";
  double last = 0;
  for (auto [t, b] : r.gpu_memory) {
    double y0 = mem_top + mem_h - last / peak * mem_h, y1 = mem_top + mem_h - b / peak * mem_h;
    std::snprintf(buf, sizeof buf, "%.2f,%.2f %.2f,%.2f ", X(t), y0, X(t), y1);
    s << buf;
    last = b;
  }
  s << "\"/>\n";
  std::snprintf(buf, sizeof buf,
                "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e45756\" stroke-dasharray=\"4\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" fill=\"#e45756\">cap %.2f GB, peak %.2f GB</text>\n",
                kLeft, kLeft + plot_w, mem_top + mem_h - p.gpu_cap_bytes / peak * mem_h,
                mem_top + mem_h - p.gpu_cap_bytes / peak * mem_h, kLeft + 4, mem_top + mem_h - p.gpu_cap_bytes / peak * mem_h - 3,
                p.gpu_cap_bytes / 1e9, r.peak.gpu / 1e9);
  s << buf;
  // Boundary map.
  std::snprintf(buf, sizeof buf, "<text x=\"5\" y=\"%.1f\">boundaries</text>\n", map_top + map_h * 0.65);
  s << buf;
  const int n = static_cast<int>(p.boundaries.size());
  const double cw = plot_w / std::max(1, n);
  for (int b = 0; b < n; ++b) {
    const auto& bp = p.boundaries[b];
    double x = kLeft + b * cw;
    if (bp.recompute) {
      std::snprintf(buf, sizeof buf,
                    "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"><title>boundary %d: "
                    "recompute</title></rect>\n",
                    x, map_top, cw - 1, map_h, kRecompute, b);
      s << buf;
      continue;
    }
    double y = map_top;
    for (auto [frac, col, name] : {std::tuple{bp.gpu, kGpu, "gpu"}, std::tuple{bp.cpu, kCpu, "cpu"},
                                   std::tuple{bp.nvme, kNvme, "nvme"}}) {
      if (frac <= 0) continue;
      std::snprintf(buf, sizeof buf,
                    "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"><title>boundary %d: %s "
                    "%.3f</title></rect>\n",
                    x, y, cw - 1, frac * map_h, col, b, name, frac);
      s << buf;
      y += frac * map_h;
    }
  }
  std::snprintf(buf, sizeof buf,
                "<text x=\"%.1f\" y=\"%.1f\"><tspan fill=\"%s\">gpu</tspan> <tspan fill=\"%s\">cpu</tspan> "
                "<tspan fill=\"%s\">nvme</tspan> <tspan fill=\"%s\">recompute</tspan> (boundary 0 on the left)</text>\n",
                kLeft, map_top + map_h + 18, kGpu, kCpu, kNvme, kRecompute);
  s << buf;
  s << "</svg>\n";
  return s.str();
}

void write_svg_timeline(const SimResult& r, const Plan& p, const std::string& path) {
  std::ofstream f(path);
  if (!f) throw Error("cannot write SVG", path, "check the directory exists and is writable");
  f << svg_timeline(r, p);
}

}  // namespace lt
