#include "train/progress.h"

#include <unistd.h>

#include <cmath>
#include <fstream>

#include "core/error.h"
#include "io/atomic_file.h"

namespace lt {

std::string format_bytes(int64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (b >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6)
    std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.0f kB", b / 1e3);
  return buf;
}

std::string format_percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, fraction < 0.1 ? "%.2f%%" : "%.1f%%", 100 * fraction);
  return buf;
}

std::string format_duration(double s) {
  char buf[32];
  if (!std::isfinite(s) || s < 0) return "?";
  const long t = std::lround(s);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  return buf;
}

Progress::Progress(const std::string& metrics_path, int64_t start_step) : tty_(isatty(STDERR_FILENO) != 0) {
  // Keep the records up to start_step (a crashed run may have logged steps past its last
  // checkpoint); a line that is not a JSON object with a step (a torn last line) goes too.
  if (metrics_path.empty()) {  // a rank other than 0: no bar on the shared terminal, no log
    tty_ = false;
    return;
  }
  std::string kept;
  if (std::ifstream in(metrics_path); in && start_step > 0) {
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json r = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!r.is_object() || !r.contains("step") || !r["step"].is_number_integer()) continue;
      if (r["step"].get<int64_t>() > start_step) continue;
      kept += line + "\n";
      if (r.contains("loss") && r.contains("lr") && r["loss"].is_number() && r["lr"].is_number())
        points_.push_back({r["step"].get<int64_t>(), r["loss"].get<double>(), r["lr"].get<double>()});
    }
  }
  write_file_atomic(metrics_path, kept);
  metrics_ = std::fopen(metrics_path.c_str(), "a");
  if (!metrics_) throw Error("cannot open the metrics log", metrics_path, "check the output directory");
}

void Progress::write_plot(const std::string& svg_path, const std::string& title) const {
  write_file_atomic(svg_path, loss_lr_svg(points_, title));
}

Progress::~Progress() {
  if (bar_shown_) std::fputc('\n', stderr);
  if (metrics_) std::fclose(metrics_);
}

void Progress::step(const ProgressLine& p, bool log_line) {
  char line[256];
  std::snprintf(line, sizeof line,
                "step %lld/%lld | loss %.4f | lr %.2e | %.0f tok/s%s | ETA %s | mem compute %s, host %s, nvme %s",
                static_cast<long long>(p.step), static_cast<long long>(p.total), p.loss, p.lr, p.tokens_per_s,
                p.mfu >= 0 ? (" | MFU " + format_percent(p.mfu)).c_str() : "",
                format_duration(p.eta_s).c_str(), format_bytes(p.compute_bytes).c_str(),
                format_bytes(p.host_bytes).c_str(), format_bytes(p.nvme_bytes).c_str());
  if (tty_) {
    const int width = 24;
    const int filled = static_cast<int>(width * p.step / std::max<int64_t>(1, p.total));
    std::fprintf(stderr, "\r\033[K[%.*s%*s] %s", filled, "########################", width - filled, "", line);
    bar_shown_ = true;
  } else if (log_line) {
    std::fprintf(stdout, "%s\n", line);  // a log: one stream, in order with the messages
    std::fflush(stdout);
  }
  std::fflush(stderr);
  if (log_line) {
    nlohmann::json r = {{"step", p.step}, {"loss", p.loss}, {"lr", p.lr}, {"grad_norm", p.grad_norm},
                        {"tokens_per_s", p.tokens_per_s}};
    if (p.mfu >= 0) r["mfu"] = p.mfu;
    metrics(r);
    points_.push_back({p.step, p.loss, p.lr});
  }
}

void Progress::message(const std::string& text) {
  if (bar_shown_) std::fprintf(stderr, "\r\033[K");
  std::fprintf(stdout, "%s\n", text.c_str());
  std::fflush(stdout);
}

void Progress::metrics(const nlohmann::json& record) {
  if (!metrics_) return;
  std::fprintf(metrics_, "%s\n", record.dump().c_str());
  std::fflush(metrics_);
}

}  // namespace lt
