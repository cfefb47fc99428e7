#include "plan/rank_parts.h"

#include <cmath>

#include "core/error.h"

namespace lt {

std::vector<int> balanced_cuts(const std::vector<double>& weights, int parts) {
  LT_ASSERT(parts >= 1, "balanced_cuts: no parts");
  const int K = static_cast<int>(weights.size());
  std::vector<double> before(size_t(K) + 1, 0.0);  // the weight of items [0, i)
  for (int i = 0; i < K; ++i) before[size_t(i) + 1] = before[size_t(i)] + weights[size_t(i)];
  std::vector<int> cut(size_t(parts) + 1, 0);
  cut[size_t(parts)] = K;
  for (int r = 1; r < parts; ++r) {
    const double want = before[size_t(K)] * r / parts;
    int best = cut[size_t(r) - 1];
    for (int i = best; i <= K; ++i)
      if (std::fabs(before[size_t(i)] - want) < std::fabs(before[size_t(best)] - want)) best = i;
    cut[size_t(r)] = best;
  }
  return cut;
}

}  // namespace lt
