// Rotary embedding kernels, compiled once per ISA level (core/isa_target.h): threaded over
// (token, head) rows, vectorized over the half of the rotated channels. In place; backward is the same
// rotation with sin negated.
#include "kernels/cpu/rope.h"

#include "core/isa_target.h"

namespace lt::LT_ISA_NS {

namespace {

template <bool kInverse>
void rotate(float* x, const float* cos, const float* sin, int64_t B, int64_t S, int64_t H,
            int64_t D, int64_t rotary, const int32_t* positions) {
  const int64_t half = rotary / 2;
  const int64_t rows = B * S * H;
#pragma omp parallel for schedule(static) if (rows * rotary >= (1 << 14))
  for (int64_t r = 0; r < rows; ++r) {
    // Row r is token r/H = b*S + s, at position s or positions[b*S + s].
    const int64_t s = positions ? positions[r / H] : (r / H) % S;
    const float* cs = cos + s * half;
    const float* sn = sin + s * half;
    float* v = x + r * D;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      const float c = cs[i], si = kInverse ? -sn[i] : sn[i];
      const float a = v[i], b = v[i + half];
      v[i] = a * c - b * si;
      v[i + half] = b * c + a * si;
    }
  }
}

}  // namespace

extern const RopeKernels kRopeKernels{rotate<false>, rotate<true>};

}  // namespace lt::LT_ISA_NS

#include "core/isa_target_end.h"
