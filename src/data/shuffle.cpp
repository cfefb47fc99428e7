#include "data/shuffle.h"

#include <numeric>

namespace lt::data {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t Rng::below(uint64_t n) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t v;
  do v = next();
  while (v >= limit);
  return v % n;
}

std::vector<uint32_t> shuffled_order(uint32_t n, uint64_t seed, uint64_t epoch) {
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  Rng rng(splitmix64(seed) ^ splitmix64(epoch + 0x51ED));
  for (uint32_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  return order;
}

}  // namespace lt::data
