// Deterministic pseudo-random numbers and shuffles for the data pipeline. std::shuffle
// and the std distributions differ between standard libraries; these do not, so a seed
// gives the same data order everywhere (and after a resume).
#pragma once

#include <cstdint>
#include <vector>

namespace lt::data {

// The splitmix64 finalizer: a good 64-bit mix of x.
uint64_t splitmix64(uint64_t x);

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return splitmix64(state_++); }
  // Uniform in [0, n) for n > 0 (rejection removes modulo bias).
  uint64_t below(uint64_t n);

 private:
  uint64_t state_;
};

// A permutation of 0..n-1 for (seed, epoch): Fisher-Yates driven by Rng.
std::vector<uint32_t> shuffled_order(uint32_t n, uint64_t seed, uint64_t epoch);

}  // namespace lt::data
