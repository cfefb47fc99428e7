// Causal depthwise conv1d + SiLU kernels (kernels/cpu/causal_conv1d.h), compiled once per
// ISA level (core/isa_target.h), vectorized over channels. The taps are read as
// w[c * K + j] with a channel stride, which the compiler turns into gathers or scalar
// loads in the forward; K is small (4), so that costs little there. The backward, which
// also accumulates dw, keeps its block's taps tap-major on the stack.
#include "kernels/cpu/causal_conv1d.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/vec_math.h"

#include "core/isa_target.h"

namespace lt::LT_ISA_NS {

namespace {

constexpr int64_t kChannelBlock = 64;  // backward's unit of work (owns its dw rows)

// a[c] for c in [c0, c1) at token t of batch row xb ([S, C]).
inline void preactivation(float* a, const float* xb, const float* w, int64_t t, int64_t c0,
                          int64_t c1, const CausalConvShape& s) {
  const int64_t C = s.channels, K = s.kernel;
  for (int64_t c = c0; c < c1; ++c) a[c - c0] = 0;
  for (int64_t j = std::max<int64_t>(0, K - 1 - t); j < K; ++j) {
    const float* xr = xb + (t - (K - 1) + j) * C;
#pragma omp simd
    for (int64_t c = c0; c < c1; ++c) a[c - c0] += w[c * K + j] * xr[c];
  }
}

void forward(float* y, const float* x, const float* w, const CausalConvShape& s) {
  const int64_t C = s.channels, rows = s.batch * s.seq;
#pragma omp parallel for schedule(static) if (rows * C * s.kernel >= (1 << 16))
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t b = row / s.seq, t = row % s.seq;
    float* yr = y + row * C;
    preactivation(yr, x + b * s.seq * C, w, t, 0, C, s);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) yr[c] = yr[c] / (1.0f + vec::exp_approx(-yr[c]));
  }
}

void backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
              const CausalConvShape& s) {
  const int64_t C = s.channels, K = s.kernel, S = s.seq;
  const int64_t blocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static) if (s.batch * S * C * K >= (1 << 16))
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock), nc = c1 - c0;
    // The block's taps and their gradients tap-major, so that the loops over channels
    // read and write contiguous memory.
    float a[kChannelBlock], da[kChannelBlock], wt[kMaxConvKernel][kChannelBlock],
        dwt[kMaxConvKernel][kChannelBlock];
    for (int64_t j = 0; j < K; ++j)
      for (int64_t c = 0; c < nc; ++c) wt[j][c] = w[(c0 + c) * K + j], dwt[j][c] = 0;
    for (int64_t b = 0; b < s.batch; ++b) {
      const float* xb = x + b * S * C;
      float* dxb = dx + b * S * C;
      for (int64_t t = 0; t < S; ++t) std::memset(dxb + t * C + c0, 0, size_t(nc) * sizeof(float));
      for (int64_t t = 0; t < S; ++t) {
        for (int64_t c = 0; c < nc; ++c) a[c] = 0;
        for (int64_t j = std::max<int64_t>(0, K - 1 - t); j < K; ++j) {
          const float* xr = xb + (t - (K - 1) + j) * C + c0;
#pragma omp simd
          for (int64_t c = 0; c < nc; ++c) a[c] += wt[j][c] * xr[c];
        }
        const float* dyr = dy + (b * S + t) * C + c0;
#pragma omp simd
        for (int64_t c = 0; c < nc; ++c) {  // silu'(a) = sig (1 + a (1 - sig))
          const float sig = 1.0f / (1.0f + vec::exp_approx(-a[c]));
          da[c] = dyr[c] * sig * (1.0f + a[c] * (1.0f - sig));
        }
        for (int64_t j = std::max<int64_t>(0, K - 1 - t); j < K; ++j) {
          const int64_t src = t - (K - 1) + j;
          const float* xr = xb + src * C + c0;
          float* dxr = dxb + src * C + c0;
#pragma omp simd
          for (int64_t c = 0; c < nc; ++c) {
            dxr[c] += wt[j][c] * da[c];
            dwt[j][c] += da[c] * xr[c];
          }
        }
      }
    }
    for (int64_t j = 0; j < K; ++j)
      for (int64_t c = 0; c < nc; ++c) dw[(c0 + c) * K + j] += dwt[j][c];
  }
}

}  // namespace

extern const CausalConv1dKernels kCausalConv1dKernels{forward, backward};

}  // namespace lt::LT_ISA_NS

#include "core/isa_target_end.h"
