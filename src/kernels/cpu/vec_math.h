// Vectorizable float math for the CPU kernels. std::exp does not vectorize under GCC
// without -ffast-math, and the softmax and SiLU loops are dominated by it; exp_approx is
// branch-free plain code that `#pragma omp simd` turns into vectors of the width the
// calling function is compiled for. The build is portable (x86-64-v2), so the kernels
// that call these are compiled once per ISA level and picked at run time
// (core/isa_dispatch.h, `*_simd.cpp`); this header is included before
// core/isa_target.h, so its functions are baseline code that inlines into each level's
// loops (always_inline: an inline function of the baseline target would otherwise be
// free to stay an out-of-line call, which blocks vectorization).
#pragma once

#include "core/dtype.h"

#include <bit>
#include <cmath>
#include <cstdint>

namespace lt::vec {

// e^x with relative error below 2 ulp for x in [-87, 88] (measured: 1.3u, u = 2^-24,
// over every float in that range; the tests assume 4u). Outside that range x is
// clamped first (so no inf/denormal results): e^x for x < -87 returns e^-87 ~ 1.6e-38
// (harmless next to the >= 1 terms of a softmax sum), and x > 88 returns e^88.
// NaN in gives an unspecified finite value out; callers that care check their inputs.
[[gnu::always_inline]] inline float exp_approx(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);  // not fmin/fmax: they stay calls
  // x = n ln2 + r, |r| <= ln2/2; ln2 split in two so that n*ln2_hi is exact.
  // Round to nearest by adding and removing 1.5 * 2^23 (std::floor would block GCC's
  // vectorizer under the default -ftrapping-math).
  constexpr float kShift = 0x1.8p23f;
  const float n = (x * 1.44269504088896341f + kShift) - kShift;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  // Taylor to r^7: the remainder r^8/8! < 5e-9 for |r| <= 0.347, under half an ulp.
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t e = (static_cast<int32_t>(n) + 127) << 23;  // 2^n, n in [-126, 127]
  return p * std::bit_cast<float>(e);
}

// sigmoid(x) = 1 / (1 + e^-x), through exp_approx.
[[gnu::always_inline]] inline float sigmoid(float x) { return 1.0f / (1.0f + exp_approx(-x)); }

// fp32 -> bf16 bits (core/dtype.h's branch-free rounding), for use inside loops.
[[gnu::always_inline]] inline uint16_t to_bf16_bits(float f) { return f32_to_bf16(f).bits; }

}  // namespace lt::vec
