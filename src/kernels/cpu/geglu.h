// The GeGLU MLP's gate (Gemma): h = gelu(g) * u with transformers' gelu_pytorch_tanh,
//   gelu(g) = 0.5 g (1 + tanh(y)),  y = sqrt(2/pi) (g + 0.044715 g^3).
// Elementwise over n. The three projections around it are linear layers
// (kernels/cpu/linear.h), as for SwiGLU (kernels/cpu/swiglu.h).
//   backward: dg, du overwrite.
// Both paths use 0.5 (1 + tanh(y)) = sigmoid(2y) and 1 - tanh(y)^2 = 4 s (1 - s): the tanh
// form cancels to 0 for y below about -9 in fp32 (-19 in double) where the value is not
// 0 yet. The fast path's sigmoid is vec_math.h's exp_approx, the reference's libm exp in
// a form stable for either sign.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/isa_dispatch.h"

namespace lt {

// sqrt(2/pi) and the cubic coefficient of the tanh approximation.
constexpr double kGeluTanhK = 0.79788456080286535588;
constexpr double kGeluTanhA = 0.044715;

// Picks the kernels of the ISA level in force (core/isa_dispatch.h).
void geglu_forward(float* h, const float* g, const float* u, int64_t n);
void geglu_backward(float* dg, float* du, const float* dh, const float* g, const float* u,
                    int64_t n);

// One table per ISA level, compiled from geglu_simd.cpp.
struct GegluKernels {
  void (*forward)(float* h, const float* g, const float* u, int64_t n);
  void (*backward)(float* dg, float* du, const float* dh, const float* g, const float* u,
                   int64_t n);
};
LT_ISA_TABLE(GegluKernels, kGegluKernels)

namespace ref {
// sigmoid(2y) = 0.5 (1 + tanh(y)) without cancellation for either sign of y.
template <typename T>
T gelu_tanh_gate(T x) {
  const T y = T(kGeluTanhK) * (x + T(kGeluTanhA) * x * x * x);
  return y >= 0 ? T(1) / (T(1) + std::exp(-2 * y)) : std::exp(2 * y) / (T(1) + std::exp(2 * y));
}
template <typename T>
void geglu_forward(T* h, const T* g, const T* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) h[i] = g[i] * gelu_tanh_gate(g[i]) * u[i];
}
template <typename T>
void geglu_backward(T* dg, T* du, const T* dh, const T* g, const T* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T x = g[i], s = gelu_tanh_gate(x);
    const T dy = T(kGeluTanhK) * (T(1) + T(3 * kGeluTanhA) * x * x);  // dy/dg
    du[i] = dh[i] * x * s;
    // d/dx [x s(2y)] = s + x 2 s (1 - s) dy  (0.5 x (1 - tanh^2) dy, without cancellation)
    dg[i] = dh[i] * u[i] * (s + T(2) * x * s * (T(1) - s) * dy);
  }
}
}  // namespace ref

}  // namespace lt
