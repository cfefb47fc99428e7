#include "kernels/cpu/elementwise.h"

#include <algorithm>

namespace lt {

namespace {
float sigmoid(float g) { return 1.0f / (1.0f + std::exp(-g)); }
}  // namespace

void add_inplace(float* y, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void add_into(float* y, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void scale_inplace(float* x, float s, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void zero_rows_with_id(float* x, const int32_t* ids, int64_t T, int64_t C, int32_t id) {
  for (int64_t t = 0; t < T; ++t)
    if (ids[t] == id) std::fill_n(x + t * C, C, 0.0f);
}

void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * src_stride, cols, dst + r * dst_stride);
}

void sigmoid_gate_forward(float* y, const float* x, const float* gate, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * sigmoid(gate[i]);
}

void sigmoid_gate_backward(float* dx, float* dgate, const float* dy, const float* x, const float* gate, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float s = sigmoid(gate[i]), d = dy[i];
    dgate[i] = d * x[i] * s * (1.0f - s);
    dx[i] = d * s;
  }
}

}  // namespace lt
