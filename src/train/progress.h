// Progress of a run: a live bar on a terminal (one line, redrawn), plain lines in a log,
// and a JSONL metrics file (one object per logged step and per evaluation), whose loss and
// learning rate also go into an SVG plot (train/metrics_plot.h) on request. Other records
// carry a "record" key saying what they are ("replan": a re-plan's outcome, see
// train/streamed_training.h) and the step they follow; they are kept or dropped on resume
// by that step like the rest, and never plotted (they have no loss).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/metrics_plot.h"

namespace lt {

struct ProgressLine {
  int64_t step = 0, total = 0;
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0, eta_s = 0;
  double mfu = -1;  // model FLOPs utilization against the profile's peak; < 0: unknown
  int64_t compute_bytes = 0, host_bytes = 0, nvme_bytes = 0;
};

class Progress {
 public:
  // metrics_path: JSONL file (empty: none, and no progress bar: the ranks of a data-parallel
  // run other than 0). Records of steps after `start_step` are dropped first (a
  // resumed run recomputes them; a fresh run, start_step 0, starts an empty log), so each
  // step appears once, as the run that produced the final weights computed it.
  Progress(const std::string& metrics_path, int64_t start_step);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Redraws the bar (terminal) or prints a line (log), and appends to the metrics file.
  void step(const ProgressLine& p, bool log_line);
  // A message on its own line (the bar is cleared first).
  void message(const std::string& text);
  void metrics(const nlohmann::json& record);
  // The loss and learning rate of every logged step (this run's and the kept records of
  // the runs it resumed) as an SVG file.
  void write_plot(const std::string& svg_path, const std::string& title) const;

 private:
  std::vector<MetricPoint> points_;
  std::FILE* metrics_ = nullptr;
  bool tty_ = false;
  bool bar_shown_ = false;
};

std::string format_bytes(int64_t bytes);
std::string format_duration(double seconds);
std::string format_percent(double fraction);  // 0.123 -> "12.3%"

}  // namespace lt
