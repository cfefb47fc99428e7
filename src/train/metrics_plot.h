// The loss and learning-rate curves of a run as one SVG (two panels over the step axis),
// written beside metrics.jsonl so that a user can look at a run without a plotting tool.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lt {

struct MetricPoint {
  int64_t step = 0;
  double loss = 0, lr = 0;
};

// A self-contained SVG document; an empty series gives panels with a "no steps logged" note.
std::string loss_lr_svg(const std::vector<MetricPoint>& points, const std::string& title);

}  // namespace lt
