// Linear layer in Hugging Face layout: W is [out=N, in=K].
//   forward:  y[M,N] = x[M,K] · W^T + bias[N]           (overwrites y)
//   backward: dx[M,K] (= or +=) dy[M,N] · W              (per accumulate_dx)
//             dw[N,K] += dy^T · x                          (accumulates)
//             dbias[N] += column sums of dy                (accumulates; skipped if null)
// With Precision::BF16, w_bf16 (the weight's bf16 copy) is used when not null; otherwise
// W is rounded on the fly. dx/dw/dbias are always fp32. Backward rounds dy to bf16 once for
// both of its GEMMs.
#pragma once

#include <cstdint>

#include "kernels/cpu/matmul.h"

namespace lt {

// The activation a linear layer reads (x), and whether it holds bf16 values already:
// under Precision::BF16 every GEMM that reads x rounds it (on the widened path, into a
// copy), so an activation that several GEMMs read, and nothing else, is better rounded
// once in place by its producer (KernelTable::round_gemm_input) and passed on as exact.
struct LinearInput {
  const float* data = nullptr;
  bool bf16_exact = false;
  LinearInput(const float* x, bool exact = false) : data(x), bf16_exact(exact) {}  // NOLINT: implicit on purpose
};

void linear_forward(float* y, LinearInput x, const float* w, const bf16* w_bf16,
                    const float* bias, int64_t M, int64_t K, int64_t N, Precision p);
void linear_backward(float* dx, float* dw, float* dbias, const float* dy, LinearInput x,
                     const float* w, const bf16* w_bf16, int64_t M, int64_t K, int64_t N,
                     bool accumulate_dx, Precision p);
// Under p, rounds x[n] in place to bf16 values where that saves this CPU's GEMMs work (a
// Precision::BF16 GEMM on the widened path rounds each fp32 operand into a copy per call)
// and returns whether it did (false under Precision::F32, or where the GEMMs that read
// activations run native bf16). gemm_inputs_rounded(p) says the same without rounding.
bool round_gemm_input(float* x, int64_t n, Precision p);
bool gemm_inputs_rounded(Precision p);

namespace ref {
template <typename T>
void linear_forward(T* y, const T* x, const T* w, const T* bias, int64_t M, int64_t K, int64_t N) {
  matmul<T>(y, x, false, w, true, M, N, K, false);
  if (bias)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) y[i * N + j] += bias[j];
}
template <typename T>
void linear_backward(T* dx, T* dw, T* dbias, const T* dy, const T* x, const T* w, int64_t M,
                     int64_t K, int64_t N, bool accumulate_dx) {
  matmul<T>(dx, dy, false, w, false, M, K, N, accumulate_dx);
  matmul<T>(dw, dy, true, x, false, N, K, M, true);
  if (dbias)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) dbias[j] += dy[i * N + j];
}
}  // namespace ref

}  // namespace lt
