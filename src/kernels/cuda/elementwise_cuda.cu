#include "kernels/cuda/elementwise_cuda.h"

#include "kernels/cuda/cuda_check.cuh"

namespace lt::cuda {
namespace {

constexpr int kThreads = 256;

// expf, not __expf, as in the gated MLPs (swiglu_cuda.cu): within 2 ulp for every input.
__device__ inline float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

__global__ void add_inplace_kernel(float* y, const float* x, int64_t n) {
  LT_GRID_STRIDE(i, n) y[i] += x[i];
}

__global__ void add_into_kernel(float* y, const float* a, const float* b, int64_t n) {
  LT_GRID_STRIDE(i, n) y[i] = a[i] + b[i];
}

__global__ void scale_inplace_kernel(float* x, float s, int64_t n) {
  LT_GRID_STRIDE(i, n) x[i] *= s;
}

// One thread per element of [T, C]; a row's elements read its id (from the cache).
__global__ void zero_rows_with_id_kernel(float* x, const int32_t* ids, int64_t T, int64_t C, int32_t id) {
  LT_GRID_STRIDE(i, T * C)
    if (ids[i / C] == id) x[i] = 0.0f;
}

__global__ void sigmoid_gate_forward_kernel(float* y, const float* x, const float* gate, int64_t n) {
  LT_GRID_STRIDE(i, n) y[i] = x[i] * sigmoid(gate[i]);
}

__global__ void sigmoid_gate_backward_kernel(float* dx, float* dgate, const float* dy, const float* x,
                                             const float* gate, int64_t n) {
  LT_GRID_STRIDE(i, n) {
    const float s = sigmoid(gate[i]), d = dy[i];
    dgate[i] = d * x[i] * s * (1.0f - s);
    dx[i] = d * s;
  }
}

}  // namespace

void add_inplace(float* y, const float* x, int64_t n, void* stream) {
  if (n == 0) return;
  add_inplace_kernel<<<grid_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(y, x, n);
  LT_CUDA_CHECK_LAUNCH(add_inplace_kernel);
}

void add_into(float* y, const float* a, const float* b, int64_t n, void* stream) {
  if (n == 0) return;
  add_into_kernel<<<grid_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(y, a, b, n);
  LT_CUDA_CHECK_LAUNCH(add_into_kernel);
}

void scale_inplace(float* x, float s, int64_t n, void* stream) {
  if (n == 0) return;
  scale_inplace_kernel<<<grid_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(x, s, n);
  LT_CUDA_CHECK_LAUNCH(scale_inplace_kernel);
}

void zero_rows_with_id(float* x, const int32_t* ids, int64_t T, int64_t C, int32_t id, void* stream) {
  if (T == 0 || C == 0) return;
  zero_rows_with_id_kernel<<<grid_for(T * C, kThreads), kThreads, 0, as_stream(stream)>>>(x, ids, T, C, id);
  LT_CUDA_CHECK_LAUNCH(zero_rows_with_id_kernel);
}

void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows, int64_t cols,
               void* stream) {
  if (rows == 0 || cols == 0) return;
  const size_t f = sizeof(float);
  LT_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_stride * f, src, src_stride * f, cols * f, rows, cudaMemcpyDeviceToDevice,
                                  as_stream(stream)));
}

void sigmoid_gate_forward(float* y, const float* x, const float* gate, int64_t n, void* stream) {
  if (n == 0) return;
  sigmoid_gate_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(y, x, gate, n);
  LT_CUDA_CHECK_LAUNCH(sigmoid_gate_forward_kernel);
}

void sigmoid_gate_backward(float* dx, float* dgate, const float* dy, const float* x, const float* gate, int64_t n,
                           void* stream) {
  if (n == 0) return;
  sigmoid_gate_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(dx, dgate, dy, x, gate, n);
  LT_CUDA_CHECK_LAUNCH(sigmoid_gate_backward_kernel);
}

}  // namespace lt::cuda
