#include "model/rope_frequencies.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace lt {

namespace {

// Llama 3.1's scaling: wavelengths shorter than original_max/high_freq_factor keep their
// frequency, longer than original_max/low_freq_factor are divided by `factor`, and those in
// between blend the two linearly in (original_max / wavelength).
double llama3_scale(double inv_freq, const RopeScaling& s) {
  const double old_len = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = old_len / s.low_freq_factor;
  const double high_freq_wavelen = old_len / s.high_freq_factor;
  const double wavelen = 2.0 * std::numbers::pi / inv_freq;
  if (wavelen < high_freq_wavelen) return inv_freq;
  if (wavelen > low_freq_wavelen) return inv_freq / s.factor;
  const double smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * inv_freq / s.factor + smooth * inv_freq;
}

}  // namespace

int64_t rotary_dim(const ModelConfig& c) {
  return static_cast<int64_t>(static_cast<double>(c.head_dim) * c.partial_rotary_factor);
}

std::vector<double> rope_inv_freq(const ModelConfig& c, bool local) {
  LT_ASSERT(c.head_dim > 0 && c.head_dim % 2 == 0, "RoPE needs an even head_dim");
  const bool own = local && c.local_rope;
  const double theta = own ? c.local_rope_theta : c.rope_theta;
  const RopeScaling& scaling = own ? c.local_rope_scaling : c.rope_scaling;
  // Partial RoPE (Qwen3.5): only the first partial_rotary_factor of each head's channels
  // rotate, with frequencies over that many channels (transformers' rotary dim).
  const int64_t rotary = rotary_dim(c);
  const int64_t half = rotary / 2;
  std::vector<double> inv(half);
  for (int64_t j = 0; j < half; ++j) {
    double f = 1.0 / std::pow(theta, static_cast<double>(2 * j) / static_cast<double>(rotary));
    switch (scaling.type) {
      case RopeScalingType::None: break;
      case RopeScalingType::Linear: f /= scaling.factor; break;
      case RopeScalingType::Llama3: f = llama3_scale(f, scaling); break;
    }
    inv[j] = f;
  }
  return inv;
}

void rope_tables(float* cos, float* sin, const ModelConfig& c, int64_t seq, bool local) {
  const std::vector<double> inv = rope_inv_freq(c, local);
  const int64_t half = static_cast<int64_t>(inv.size());
  for (int64_t p = 0; p < seq; ++p) {
    for (int64_t j = 0; j < half; ++j) {
      const double angle = static_cast<double>(p) * inv[j];
      cos[p * half + j] = static_cast<float>(std::cos(angle));
      sin[p * half + j] = static_cast<float>(std::sin(angle));
    }
  }
}

}  // namespace lt
