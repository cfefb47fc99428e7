#include "kernels/cuda/cross_entropy_cuda.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_check.cuh"

namespace lt::cuda {
namespace {

constexpr int kThreads = 256;

// Per token: the running maximum and exponential sum of the logits seen so far, and the
// target's logit once its sub-chunk has passed.
struct TokenState {
  float* max;
  float* sum;
  float* target_logit;
  float* lse;
};

__global__ void init_state_kernel(TokenState st, int64_t T) {
  LT_GRID_STRIDE(t, T) {
    st.max[t] = -INFINITY;
    st.sum[t] = 0.f;
    st.target_logit[t] = 0.f;
  }
}

// One block per token: folds sub-chunk [v0, v0 + n) of its logits into its state.
__global__ void fold_chunk_kernel(TokenState st, const float* logits, const int32_t* targets, int64_t n,
                                  int64_t v0) {
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  const float* row = logits + t * n;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, row[j]);
  m = block_max(m, scratch);
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += expf(row[j] - m);
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) {
    const float old_max = st.max[t], new_max = fmaxf(old_max, m);
    st.sum[t] = st.sum[t] * expf(old_max - new_max) + s * expf(m - new_max);
    st.max[t] = new_max;
    const int32_t y = targets[t];
    if (y >= v0 && y < v0 + n) st.target_logit[t] = row[y - v0];
  }
}

__global__ void finish_lse_kernel(TokenState st, int64_t T) {
  LT_GRID_STRIDE(t, T) st.lse[t] = st.max[t] + logf(st.sum[t]);
}

__device__ inline bool counted(int32_t y, int64_t V) { return y >= 0 && y < V; }

__global__ void loss_kernel(double* loss, TokenState st, const int32_t* targets, int64_t T, int64_t V) {
  __shared__ double scratch[32];
  double s = 0.0;
  for (int64_t t = threadIdx.x; t < T; t += blockDim.x)
    if (counted(targets[t], V)) s += static_cast<double>(st.lse[t]) - st.target_logit[t];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) *loss = s;
}

__device__ inline void store(float* p, float v) { *p = v; }
__device__ inline void store(uint16_t* p, float v) { *p = f32_to_bf16_bits(v); }

// The logits' gradient for sub-chunk [v0, v0 + n): grad_scale * (softmax - one-hot), zero
// for an ignored token. In place over the logits when Out is float.
template <typename Out>
__global__ void logits_grad_kernel(Out* grad, const float* logits, TokenState st, const int32_t* targets,
                                   int64_t T, int64_t n, int64_t v0, int64_t V, float grad_scale) {
  LT_GRID_STRIDE(i, T * n) {
    const int64_t t = i / n, j = i - t * n;
    const int32_t y = targets[t];
    float g = 0.f;
    if (counted(y, V)) g = grad_scale * (expf(logits[i] - st.lse[t]) - (y == v0 + j ? 1.f : 0.f));
    store(grad + i, g);
  }
}

struct Workspace {
  float* logits;
  void* grad;  // bf16 under bf16 inputs; fp32 inputs reuse the logits
  TokenState st;
};

Workspace cut(void* w, int64_t T, int64_t vc, GemmInput input) {
  char* p = static_cast<char*>(w);
  Workspace ws{};
  ws.logits = reinterpret_cast<float*>(p);
  p += align_workspace(static_cast<size_t>(T * vc) * sizeof(float));
  ws.grad = input == GemmInput::BF16 ? static_cast<void*>(p) : static_cast<void*>(ws.logits);
  if (input == GemmInput::BF16) p += align_workspace(static_cast<size_t>(T * vc) * sizeof(uint16_t));
  float** fields[] = {&ws.st.max, &ws.st.sum, &ws.st.target_logit, &ws.st.lse};
  for (float** f : fields) {
    *f = reinterpret_cast<float*>(p);
    p += align_workspace(static_cast<size_t>(T) * sizeof(float));
  }
  return ws;
}

size_t element_bytes(GemmInput in) { return in == GemmInput::BF16 ? 2 : 4; }

}  // namespace

size_t head_cross_entropy_workspace_bytes(int64_t T, int64_t V, int64_t vocab_chunk, GemmInput input) {
  const int64_t vc = std::min(V, vocab_chunk);
  return align_workspace(static_cast<size_t>(T * vc) * sizeof(float)) +
         (input == GemmInput::BF16 ? align_workspace(static_cast<size_t>(T * vc) * sizeof(uint16_t)) : 0) +
         4 * align_workspace(static_cast<size_t>(T) * sizeof(float));
}

void head_cross_entropy(Gemm& gemm, const HeadCrossEntropyArgs& a, void* workspace, void* stream) {
  if (a.vocab_chunk < 1) throw std::runtime_error("head_cross_entropy (cuda): vocab_chunk must be >= 1");
  if ((a.dx == nullptr) != (a.dw == nullptr))
    throw std::runtime_error("head_cross_entropy (cuda): give dx and dw both, or neither");
  const cudaStream_t s = as_stream(stream);
  if (a.T == 0) {
    LT_CUDA_CHECK(cudaMemsetAsync(a.loss, 0, sizeof(double), s));
    return;
  }
  const int64_t vc = std::min(a.V, a.vocab_chunk);
  Workspace ws = cut(workspace, a.T, vc, a.input);
  const size_t eb = element_bytes(a.input);
  auto rows = [&](int64_t v0) { return static_cast<const char*>(a.w) + static_cast<size_t>(v0 * a.C) * eb; };
  auto logits_of = [&](int64_t v0, int64_t n) {  // logits [T, n] = x . w[v0 : v0 + n]^T
    GemmArgs g;
    g.a = a.x, g.b = rows(v0), g.c = ws.logits;
    g.m = a.T, g.n = n, g.k = a.C, g.trans_b = true, g.input = a.input;
    gemm.run(g, stream);
  };

  init_state_kernel<<<grid_for(a.T, kThreads), kThreads, 0, s>>>(ws.st, a.T);
  LT_CUDA_CHECK_LAUNCH(init_state_kernel);
  for (int64_t v0 = 0; v0 < a.V; v0 += vc) {
    const int64_t n = std::min(vc, a.V - v0);
    logits_of(v0, n);
    fold_chunk_kernel<<<static_cast<unsigned>(a.T), kThreads, 0, s>>>(ws.st, ws.logits, a.targets, n, v0);
    LT_CUDA_CHECK_LAUNCH(fold_chunk_kernel);
  }
  finish_lse_kernel<<<grid_for(a.T, kThreads), kThreads, 0, s>>>(ws.st, a.T);
  LT_CUDA_CHECK_LAUNCH(finish_lse_kernel);
  loss_kernel<<<1, kThreads, 0, s>>>(a.loss, ws.st, a.targets, a.T, a.V);
  LT_CUDA_CHECK_LAUNCH(loss_kernel);
  if (!a.dx) return;

  for (int64_t v0 = 0; v0 < a.V; v0 += vc) {
    const int64_t n = std::min(vc, a.V - v0);
    logits_of(v0, n);
    if (a.input == GemmInput::BF16)
      logits_grad_kernel<<<grid_for(a.T * n, kThreads), kThreads, 0, s>>>(
          static_cast<uint16_t*>(ws.grad), ws.logits, ws.st, a.targets, a.T, n, v0, a.V, a.grad_scale);
    else
      logits_grad_kernel<<<grid_for(a.T * n, kThreads), kThreads, 0, s>>>(
          static_cast<float*>(ws.grad), ws.logits, ws.st, a.targets, a.T, n, v0, a.V, a.grad_scale);
    LT_CUDA_CHECK_LAUNCH(logits_grad_kernel);
    GemmArgs dx;  // dx [T, C] (+)= grad [T, n] . w[v0 : v0 + n]
    dx.a = ws.grad, dx.b = rows(v0), dx.c = a.dx;
    dx.m = a.T, dx.n = a.C, dx.k = n, dx.input = a.input, dx.beta = v0 == 0 ? 0.0f : 1.0f;
    gemm.run(dx, stream);
    GemmArgs dw;  // dw[v0 : v0 + n] += grad^T [n, T] . x [T, C]
    dw.a = ws.grad, dw.b = a.x, dw.c = a.dw + v0 * a.C;
    dw.m = n, dw.n = a.C, dw.k = a.T, dw.trans_a = true, dw.input = a.input, dw.beta = 1.0f;
    gemm.run(dw, stream);
  }
}

}  // namespace lt::cuda
