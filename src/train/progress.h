// Progress of a run: a live bar on a terminal (one line, redrawn), plain lines in a log,
// and a JSONL metrics file (one object per logged step and per evaluation).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace lt {

struct ProgressLine {
  int64_t step = 0, total = 0;
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0, eta_s = 0;
  int64_t compute_bytes = 0, host_bytes = 0, nvme_bytes = 0;
};

class Progress {
 public:
  // metrics_path: JSONL file, appended to (so a resumed run continues it).
  explicit Progress(const std::string& metrics_path);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Redraws the bar (terminal) or prints a line (log), and appends to the metrics file.
  void step(const ProgressLine& p, bool log_line);
  // A message on its own line (the bar is cleared first).
  void message(const std::string& text);
  void metrics(const nlohmann::json& record);

 private:
  std::FILE* metrics_ = nullptr;
  bool tty_ = false;
  bool bar_shown_ = false;
};

std::string format_bytes(int64_t bytes);
std::string format_duration(double seconds);

}  // namespace lt
