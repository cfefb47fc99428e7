#include "kernels/cuda/linear_cuda.h"

#include <stdexcept>
#include <string>

#include "kernels/cuda/chunk_partials.cuh"
#include "kernels/cuda/convert_cuda.h"
#include "kernels/cuda/cuda_check.cuh"

namespace lt::cuda {
namespace {

constexpr int kThreads = 256;
// Rows per dbias partial: each partial is one thread's in-order sum over this many rows.
constexpr int64_t kRowChunk = 64;

int64_t row_chunks(int64_t M) { return (M + kRowChunk - 1) / kRowChunk; }
size_t bf16_bytes(int64_t n) { return align_workspace(static_cast<size_t>(n) * sizeof(uint16_t)); }

__global__ void add_bias_kernel(float* y, const float* bias, int64_t M, int64_t N) {
  LT_GRID_STRIDE(i, M * N) { y[i] += bias[i % N]; }
}

// partial[chunk, j] = sum over the chunk's rows, in order, of dy[., j].
// Grid: chunks on x (up to 2^31 - 1 blocks), blocks of columns on y.
__global__ void column_sum_partial_kernel(float* partial, const float* dy, int64_t M, int64_t N) {
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= N) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRowChunk;
  const int64_t r1 = r0 + kRowChunk < M ? r0 + kRowChunk : M;
  float s = 0.f;
  for (int64_t r = r0; r < r1; ++r) s += dy[r * N + j];
  partial[blockIdx.x * N + j] = s;
}

// Carves the workspace into consecutive 256-byte-aligned pieces.
class Carver {
 public:
  explicit Carver(void* base) : at_(static_cast<char*>(base)) {}
  void* take(size_t bytes) {
    void* p = at_;
    at_ += align_workspace(bytes);
    return p;
  }

 private:
  char* at_;
};

// One operand as the product reads it: the fp32 values, or bf16 bits (the copy given, else
// the fp32 values rounded into the workspace).
const void* operand(const float* f32, const uint16_t* b16, int64_t n, GemmInput input, Carver& ws, void* stream,
                    const char* what) {
  if (input == GemmInput::F32) {
    if (!f32) throw std::runtime_error(std::string("cuda linear: fp32 products need the fp32 ") + what);
    return f32;
  }
  if (b16) return b16;
  if (!f32) throw std::runtime_error(std::string("cuda linear: no values for ") + what);
  auto* dst = static_cast<uint16_t*>(ws.take(static_cast<size_t>(n) * sizeof(uint16_t)));
  convert_f32_to_bf16(dst, f32, n, stream);
  return dst;
}

void product(Gemm& gemm, float* c, const void* a, bool ta, const void* b, bool tb, int64_t M, int64_t N, int64_t K,
             bool accumulate, GemmInput input, void* stream) {
  GemmArgs g;
  g.a = a, g.b = b, g.c = c;
  g.m = M, g.n = N, g.k = K;
  g.trans_a = ta, g.trans_b = tb, g.input = input;
  g.alpha = 1.0f, g.beta = accumulate ? 1.0f : 0.0f;
  gemm.run(g, stream);
}

}  // namespace

size_t linear_forward_workspace_bytes(int64_t M, int64_t K, int64_t N, GemmInput input, bool has_w_bf16) {
  if (input == GemmInput::F32) return 0;
  return bf16_bytes(M * K) + (has_w_bf16 ? 0 : bf16_bytes(N * K));
}

void linear_forward(Gemm& gemm, float* y, const float* x, const float* w, const uint16_t* w_bf16, const float* bias,
                    int64_t M, int64_t K, int64_t N, GemmInput input, void* workspace, void* stream) {
  if (M == 0 || N == 0) return;
  Carver ws(workspace);
  const void* a = operand(x, nullptr, M * K, input, ws, stream, "input x");
  const void* b = operand(w, w_bf16, N * K, input, ws, stream, "weight");
  product(gemm, y, a, false, b, true, M, N, K, false, input, stream);
  if (bias) {
    add_bias_kernel<<<grid_for(M * N, kThreads), kThreads, 0, as_stream(stream)>>>(y, bias, M, N);
    LT_CUDA_CHECK_LAUNCH(add_bias_kernel);
  }
}

size_t linear_backward_workspace_bytes(int64_t M, int64_t K, int64_t N, GemmInput input, bool has_w_bf16,
                                       bool has_dbias) {
  size_t bytes = has_dbias ? align_workspace(static_cast<size_t>(row_chunks(M) * N) * sizeof(float)) : 0;
  if (input == GemmInput::BF16) bytes += bf16_bytes(M * N) + bf16_bytes(M * K) + (has_w_bf16 ? 0 : bf16_bytes(N * K));
  return bytes;
}

void linear_backward(Gemm& gemm, float* dx, float* dw, float* dbias, const float* dy, const float* x, const float* w,
                     const uint16_t* w_bf16, int64_t M, int64_t K, int64_t N, bool accumulate_dx, GemmInput input,
                     void* workspace, void* stream) {
  if (M == 0) return;
  Carver ws(workspace);
  float* partial = dbias ? static_cast<float*>(ws.take(static_cast<size_t>(row_chunks(M) * N) * sizeof(float)))
                         : nullptr;
  const void* g = (dx || dw) ? operand(dy, nullptr, M * N, input, ws, stream, "output gradient dy") : nullptr;
  // dx[M,K] (=|+=) dy[M,N] W[N,K]
  if (dx) {
    const void* b = operand(w, w_bf16, N * K, input, ws, stream, "weight");
    product(gemm, dx, g, false, b, false, M, K, N, accumulate_dx, input, stream);
  }
  // dw[N,K] += dy^T x: dy [M,N] is op(A) stored transposed.
  if (dw) {
    const void* b = operand(x, nullptr, M * K, input, ws, stream, "input x");
    product(gemm, dw, g, true, b, false, N, K, M, true, input, stream);
  }
  if (dbias && N > 0) {
    const dim3 grid(static_cast<unsigned>(row_chunks(M)), static_cast<unsigned>((N + kThreads - 1) / kThreads));
    column_sum_partial_kernel<<<grid, kThreads, 0, as_stream(stream)>>>(partial, dy, M, N);
    LT_CUDA_CHECK_LAUNCH(column_sum_partial_kernel);
    add_chunk_partials(dbias, partial, row_chunks(M), N, as_stream(stream));
  }
}

size_t matmul_workspace_bytes(int64_t M, int64_t N, int64_t K, GemmInput input) {
  return input == GemmInput::F32 ? 0 : bf16_bytes(M * K) + bf16_bytes(K * N);
}

void matmul(Gemm& gemm, float* c, const float* a, bool trans_a, const float* b, bool trans_b, int64_t M, int64_t N,
            int64_t K, bool accumulate, GemmInput input, void* workspace, void* stream) {
  if (M == 0 || N == 0) return;
  Carver ws(workspace);
  const void* ra = operand(a, nullptr, M * K, input, ws, stream, "A");
  const void* rb = operand(b, nullptr, K * N, input, ws, stream, "B");
  product(gemm, c, ra, trans_a, rb, trans_b, M, N, K, accumulate, input, stream);
}

}  // namespace lt::cuda
