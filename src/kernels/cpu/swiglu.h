// The SwiGLU MLP's gate: h = silu(g) * u, silu(g) = g * sigmoid(g). Elementwise over n.
// The three projections around it are linear layers (kernels/cpu/linear.h).
//   backward: dg, du overwrite.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/isa_dispatch.h"

namespace lt {

// Picks the kernels of the ISA level in force (core/isa_dispatch.h).
void swiglu_forward(float* h, const float* g, const float* u, int64_t n);
void swiglu_backward(float* dg, float* du, const float* dh, const float* g, const float* u,
                     int64_t n);

// One table per ISA level, compiled from swiglu_simd.cpp.
struct SwigluKernels {
  void (*forward)(float* h, const float* g, const float* u, int64_t n);
  void (*backward)(float* dg, float* du, const float* dh, const float* g, const float* u,
                   int64_t n);
};
LT_ISA_TABLE(SwigluKernels, kSwigluKernels)

namespace ref {
template <typename T>
void swiglu_forward(T* h, const T* g, const T* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) h[i] = g[i] / (T(1) + std::exp(-g[i])) * u[i];
}
template <typename T>
void swiglu_backward(T* dg, T* du, const T* dh, const T* g, const T* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T sig = T(1) / (T(1) + std::exp(-g[i]));
    du[i] = dh[i] * g[i] * sig;
    dg[i] = dh[i] * u[i] * sig * (T(1) + g[i] * (T(1) - sig));
  }
}
}  // namespace ref

}  // namespace lt
