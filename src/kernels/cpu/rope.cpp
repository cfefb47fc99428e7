// Rotary embedding, fast path: threaded over (token, head) rows, vectorized over the
// half-dimension. In place; backward is the same rotation with sin negated.
#include "kernels/cpu/rope.h"

#include "core/error.h"

namespace lt {

namespace {

template <bool kInverse>
void rope_apply(float* x, const float* cos, const float* sin, int64_t B, int64_t S, int64_t H,
                int64_t D) {
  LT_ASSERT(D % 2 == 0, "rope needs an even head dimension");
  const int64_t half = D / 2;
  const int64_t rows = B * S * H;
#pragma omp parallel for schedule(static) if (rows * D >= (1 << 14))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t s = (r / H) % S;  // row r is token r/H = b*S + s
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

void rope_forward(float* x, const float* cos, const float* sin, int64_t B, int64_t S, int64_t H,
                  int64_t D) {
  rope_apply<false>(x, cos, sin, B, S, H, D);
}

void rope_backward(float* dx, const float* cos, const float* sin, int64_t B, int64_t S, int64_t H,
                   int64_t D) {
  rope_apply<true>(dx, cos, sin, B, S, H, D);
}

}  // namespace lt
