// The decoder block's small elementwise steps on the GPU, fp32, with the contracts of
// kernels/cpu/elementwise.h: residual adds, a scale, the rows of a padding id zeroed, row
// copies between layouts (cudaMemcpy2DAsync), and the output gate y = x * sigmoid(gate)
// with its backward. Device pointers (ids too); stream is a cudaStream_t (null: the
// default stream).
#pragma once

#include <cstdint>

namespace lt::cuda {

void add_inplace(float* y, const float* x, int64_t n, void* stream = nullptr);
void add_into(float* y, const float* a, const float* b, int64_t n, void* stream = nullptr);
void scale_inplace(float* x, float s, int64_t n, void* stream = nullptr);
void zero_rows_with_id(float* x, const int32_t* ids, int64_t T, int64_t C, int32_t id, void* stream = nullptr);
void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows, int64_t cols,
               void* stream = nullptr);
void sigmoid_gate_forward(float* y, const float* x, const float* gate, int64_t n, void* stream = nullptr);
void sigmoid_gate_backward(float* dx, float* dgate, const float* dy, const float* x, const float* gate, int64_t n,
                           void* stream = nullptr);

}  // namespace lt::cuda
