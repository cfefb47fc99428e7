// Small helpers shared by the AdamW tests: deterministic inputs and state snapshots.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "optim/adamw.h"

namespace lt::test {

// Gradients spanning the decades the dynamic map resolves: N(0,1) * 10^U(-5, 0), with
// ~1% exact zeros (whole-block zeros arise from the tail, too).
inline std::vector<float> spread_gradient(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> decade(-5.f, 0.f), unit(0.f, 1.f);
  std::vector<float> g(n);
  for (auto& x : g) x = unit(rng) < 0.01f ? 0.f : normal(rng) * std::pow(10.f, decade(rng));
  return g;
}

inline std::vector<float> normal_vector(int64_t n, float sigma, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, sigma);
  std::vector<float> x(n);
  for (auto& v : x) v = normal(rng);
  return x;
}

inline std::vector<bf16> to_bf16(const std::vector<float>& x) {
  std::vector<bf16> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = f32_to_bf16(x[i]);
  return y;
}

// A copy of one tensor's optimizer state, for before/after comparisons.
struct StateSnapshot {
  std::vector<uint8_t> m_code, v_code;
  std::vector<float> m_absmax, v_absmax, m, v;
  bool operator==(const StateSnapshot&) const = default;
};

inline StateSnapshot snapshot(AdamW& opt, int id) {
  StateSnapshot s;
  const int64_t n = opt.numel(id);
  if (opt.format(id) == StateFormat::Q8) {
    const AdamW8State q = opt.q8_state(id);
    const int64_t nb = (n + opt.config().block_size - 1) / opt.config().block_size;
    s.m_code.assign(q.m_code, q.m_code + n);
    s.v_code.assign(q.v_code, q.v_code + n);
    s.m_absmax.assign(q.m_absmax, q.m_absmax + nb);
    s.v_absmax.assign(q.v_absmax, q.v_absmax + nb);
  } else {
    const AdamW32State f = opt.f32_state(id);
    s.m.assign(f.m, f.m + n);
    s.v.assign(f.v, f.v + n);
  }
  return s;
}

// (memcmp of an empty vector's null data() is undefined behaviour even for 0 bytes; UBSan
// reported it for the fp32 states' empty absmax vectors.)
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), 4 * a.size()) == 0);
}

// Steps every tensor of `opt` through steps first..last (lr 1e-3, no clipping) with
// spread gradients seeded by step and tensor.
inline void train_all(AdamW& opt, std::vector<std::vector<float>>& params, int64_t first, int64_t last) {
  for (int64_t step = first; step <= last; ++step)
    for (int id = 0; id < opt.num_tensors(); ++id)
      opt.step_tensor(id, params[id].data(), spread_gradient(opt.numel(id), 100 * step + id).data(), nullptr, 1e-3f,
                      1.f, step);
}

// One N(0, 0.2) parameter vector per tensor of `opt`.
inline std::vector<std::vector<float>> init_params(const AdamW& opt) {
  std::vector<std::vector<float>> p;
  for (int id = 0; id < opt.num_tensors(); ++id) p.push_back(normal_vector(opt.numel(id), 0.2f, id));
  return p;
}

}  // namespace lt::test
