// The decoder block's small elementwise steps: the residual adds, the Gemma embedding
// scale, the padding row of an embedding's gradient, the output gate of gated attention,
// and row copies between interleaved and split layouts (the query | gate halves of each
// head, the q | k | v channels of the DeltaNet's convolution). Each is a kernel-table entry
// (kernels/kernel_table.h) so that the layer code hands device pointers to a device
// backend's own versions (kernels/cuda/elementwise_cuda.h) instead of looping over them.
//
// Every output element is computed from its own inputs alone, in one fixed expression, so
// the results do not depend on the thread count or on vectorization. The gate's sigmoid is
// 1 / (1 + exp(-g)), as the rest of the CPU kernels take it.
#pragma once

#include <cmath>
#include <cstdint>

namespace lt {

// y += x.
void add_inplace(float* y, const float* x, int64_t n);
// y = a + b (y may be a or b).
void add_into(float* y, const float* a, const float* b, int64_t n);
// x *= s.
void scale_inplace(float* x, float s, int64_t n);
// Rows t of x ([T, C]) whose ids[t] == id set to 0 (nn.Embedding's padding_idx: that row's
// lookups pass no gradient).
void zero_rows_with_id(float* x, const int32_t* ids, int64_t T, int64_t C, int32_t id);
// dst[r * dst_stride + j] = src[r * src_stride + j] for r < rows, j < cols (strides in
// floats, >= cols; the two ranges do not overlap).
void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows, int64_t cols);

// The output gate: y = x * sigmoid(gate). Backward, from dy: dgate = dy * x * s * (1 - s)
// and dx = dy * s, s = sigmoid(gate), both overwritten; dx may be dy (in place).
void sigmoid_gate_forward(float* y, const float* x, const float* gate, int64_t n);
void sigmoid_gate_backward(float* dx, float* dgate, const float* dy, const float* x, const float* gate, int64_t n);

namespace ref {
template <typename T>
void sigmoid_gate_forward(T* y, const T* x, const T* gate, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (T(1) + std::exp(-gate[i]));
}
template <typename T>
void sigmoid_gate_backward(T* dx, T* dgate, const T* dy, const T* x, const T* gate, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T s = T(1) / (T(1) + std::exp(-gate[i])), d = dy[i];
    dgate[i] = d * x[i] * s * (T(1) - s);
    dx[i] = d * s;
  }
}
}  // namespace ref

}  // namespace lt
