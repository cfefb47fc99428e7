#include "plan/plan_decisions.h"

namespace lt {

std::vector<std::pair<int, int>> recompute_blocks(const std::vector<BoundaryPlacement>& b) {
  std::vector<std::pair<int, int>> blocks;
  int last = 0;
  for (int i = 1; i < static_cast<int>(b.size()); ++i) {
    if (b[i].recompute && i + 1 < static_cast<int>(b.size())) continue;
    blocks.emplace_back(last, i);
    last = i;
  }
  return blocks;
}

}  // namespace lt
