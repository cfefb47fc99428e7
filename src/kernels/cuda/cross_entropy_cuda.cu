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
    // The CPU's expression (kernels/cpu/cross_entropy_simd.cpp), so that the one rounding
    // before bf16's is the same: grad_scale p - grad_scale, not grad_scale (p - 1).
    if (counted(y, V)) g = grad_scale * expf(logits[i] - st.lse[t]) - (y == v0 + j ? grad_scale : 0.f);
    store(grad + i, g);
  }
}

size_t element_bytes(GemmInput in) { return in == GemmInput::BF16 ? 2 : 4; }

}  // namespace

size_t head_cross_entropy_workspace_bytes(int64_t T, int64_t V, int64_t vocab_chunk, GemmInput input) {
  const int64_t vc = std::min(V, vocab_chunk);
  return align_workspace(static_cast<size_t>(T * vc) * sizeof(float)) +
         (input == GemmInput::BF16 ? align_workspace(static_cast<size_t>(T * vc) * sizeof(uint16_t)) : 0) +
         4 * align_workspace(static_cast<size_t>(T) * sizeof(float));
}

HeadCrossEntropyPasses::HeadCrossEntropyPasses(Gemm& gemm, const void* x, const int32_t* targets, int64_t T,
                                               int64_t C, int64_t V, GemmInput input, float grad_scale,
                                               int64_t vocab_chunk, void* workspace, void* stream)
    : gemm_(gemm), x_(x), targets_(targets), T_(T), C_(C), V_(V), input_(input), grad_scale_(grad_scale),
      stream_(stream) {
  if (vocab_chunk < 1) throw std::runtime_error("head_cross_entropy (cuda): vocab_chunk must be >= 1");
  const int64_t vc = std::min(V, vocab_chunk);
  char* p = static_cast<char*>(workspace);
  logits_ = reinterpret_cast<float*>(p);
  p += align_workspace(static_cast<size_t>(T * vc) * sizeof(float));
  grad_ = input == GemmInput::BF16 ? static_cast<void*>(p) : static_cast<void*>(logits_);
  if (input == GemmInput::BF16) p += align_workspace(static_cast<size_t>(T * vc) * sizeof(uint16_t));
  for (float** f : {&max_, &sum_, &target_logit_, &lse_}) {
    *f = reinterpret_cast<float*>(p);
    p += align_workspace(static_cast<size_t>(T) * sizeof(float));
  }
  if (T == 0) return;
  init_state_kernel<<<grid_for(T, kThreads), kThreads, 0, as_stream(stream)>>>(
      TokenState{max_, sum_, target_logit_, lse_}, T);
  LT_CUDA_CHECK_LAUNCH(init_state_kernel);
}

// logits [T, n] = x . rows^T
void HeadCrossEntropyPasses::logits_of(const void* rows, int64_t n) {
  GemmArgs g;
  g.a = x_, g.b = rows, g.c = logits_;
  g.m = T_, g.n = n, g.k = C_, g.trans_b = true, g.input = input_;
  gemm_.run(g, stream_);
}

void HeadCrossEntropyPasses::fold(const void* rows, int64_t v0, int64_t n) {
  if (T_ == 0 || n == 0) return;
  logits_of(rows, n);
  fold_chunk_kernel<<<static_cast<unsigned>(T_), kThreads, 0, as_stream(stream_)>>>(
      TokenState{max_, sum_, target_logit_, lse_}, logits_, targets_, n, v0);
  LT_CUDA_CHECK_LAUNCH(fold_chunk_kernel);
}

void HeadCrossEntropyPasses::finish(double* loss) {
  const cudaStream_t s = as_stream(stream_);
  if (T_ == 0) {
    LT_CUDA_CHECK(cudaMemsetAsync(loss, 0, sizeof(double), s));
    return;
  }
  const TokenState st{max_, sum_, target_logit_, lse_};
  finish_lse_kernel<<<grid_for(T_, kThreads), kThreads, 0, s>>>(st, T_);
  LT_CUDA_CHECK_LAUNCH(finish_lse_kernel);
  loss_kernel<<<1, kThreads, 0, s>>>(loss, st, targets_, T_, V_);
  LT_CUDA_CHECK_LAUNCH(loss_kernel);
}

void HeadCrossEntropyPasses::backward(const void* rows, int64_t v0, int64_t n, float* dx, float* dw_rows) {
  if (T_ == 0 || n == 0) return;
  const cudaStream_t s = as_stream(stream_);
  const TokenState st{max_, sum_, target_logit_, lse_};
  logits_of(rows, n);
  if (input_ == GemmInput::BF16)
    logits_grad_kernel<<<grid_for(T_ * n, kThreads), kThreads, 0, s>>>(static_cast<uint16_t*>(grad_), logits_, st,
                                                                       targets_, T_, n, v0, V_, grad_scale_);
  else
    logits_grad_kernel<<<grid_for(T_ * n, kThreads), kThreads, 0, s>>>(static_cast<float*>(grad_), logits_, st,
                                                                       targets_, T_, n, v0, V_, grad_scale_);
  LT_CUDA_CHECK_LAUNCH(logits_grad_kernel);
  GemmArgs gx;  // dx [T, C] (+)= grad [T, n] . rows
  gx.a = grad_, gx.b = rows, gx.c = dx;
  gx.m = T_, gx.n = C_, gx.k = n, gx.input = input_, gx.beta = v0 == 0 ? 0.0f : 1.0f;
  gemm_.run(gx, stream_);
  GemmArgs gw;  // dw_rows += grad^T [n, T] . x [T, C]
  gw.a = grad_, gw.b = x_, gw.c = dw_rows;
  gw.m = n, gw.n = C_, gw.k = T_, gw.trans_a = true, gw.input = input_, gw.beta = 1.0f;
  gemm_.run(gw, stream_);
}

void head_cross_entropy(Gemm& gemm, const HeadCrossEntropyArgs& a, void* workspace, void* stream) {
  if ((a.dx == nullptr) != (a.dw == nullptr))
    throw std::runtime_error("head_cross_entropy (cuda): give dx and dw both, or neither");
  HeadCrossEntropyPasses passes(gemm, a.x, a.targets, a.T, a.C, a.V, a.input, a.grad_scale, a.vocab_chunk,
                                workspace, stream);
  const int64_t vc = std::min(a.V, a.vocab_chunk);
  const size_t eb = element_bytes(a.input);
  auto rows = [&](int64_t v0) { return static_cast<const char*>(a.w) + static_cast<size_t>(v0 * a.C) * eb; };
  for (int64_t v0 = 0; v0 < a.V; v0 += vc) passes.fold(rows(v0), v0, std::min(vc, a.V - v0));
  passes.finish(a.loss);
  if (!a.dx) return;
  for (int64_t v0 = 0; v0 < a.V; v0 += vc)
    passes.backward(rows(v0), v0, std::min(vc, a.V - v0), a.dx, a.dw + v0 * a.C);
}

}  // namespace lt::cuda
