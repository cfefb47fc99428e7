#include "train/progress.h"

#include <unistd.h>

#include <cmath>

#include "core/error.h"

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

Progress::Progress(const std::string& metrics_path) : tty_(isatty(STDERR_FILENO) != 0) {
  metrics_ = std::fopen(metrics_path.c_str(), "a");
  if (!metrics_) throw Error("cannot open the metrics log", metrics_path, "check the output directory");
}

Progress::~Progress() {
  if (bar_shown_) std::fputc('\n', stderr);
  if (metrics_) std::fclose(metrics_);
}

void Progress::step(const ProgressLine& p, bool log_line) {
  char line[256];
  std::snprintf(line, sizeof line,
                "step %lld/%lld | loss %.4f | lr %.2e | %.0f tok/s | ETA %s | mem compute %s, host %s, nvme %s",
                static_cast<long long>(p.step), static_cast<long long>(p.total), p.loss, p.lr, p.tokens_per_s,
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
  if (log_line)
    metrics({{"step", p.step}, {"loss", p.loss}, {"lr", p.lr}, {"grad_norm", p.grad_norm},
             {"tokens_per_s", p.tokens_per_s}});
}

void Progress::message(const std::string& text) {
  if (bar_shown_) std::fprintf(stderr, "\r\033[K");
  std::fprintf(stdout, "%s\n", text.c_str());
  std::fflush(stdout);
}

void Progress::metrics(const nlohmann::json& record) {
  std::fprintf(metrics_, "%s\n", record.dump().c_str());
  std::fflush(metrics_);
}

}  // namespace lt
