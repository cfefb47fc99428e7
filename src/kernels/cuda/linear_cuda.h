// Linear layers and plain matrix products on the GPU with the CPU kernels' contracts
// (kernels/cpu/linear.h, kernels/cpu/matmul.h), over cuBLASLt (matmul_cuda.h):
//   forward:  y[M,N] = x[M,K] W^T + bias[N]               (overwrites y)
//   backward: dx[M,K] (= or +=) dy[M,N] W                  (per accumulate_dx; skipped if null)
//             dw[N,K] += dy^T x                            (accumulates; skipped if null)
//             dbias[N] += column sums of dy                (accumulates; skipped if null)
//   matmul:   c[M,N] (= or +=) op(a) op(b)
// W is [out=N, in=K], the Hugging Face layout. Under bf16 inputs (GemmInput::BF16) every
// operand is rounded to bf16 (nearest even) and the products accumulate in fp32: the
// weight's bf16 copy is read when given, the other operands are rounded into the
// workspace first. Under fp32 inputs only the fp32 operands are read (W must be given).
// The bias is added and dbias summed by kernels of this file, in a fixed order (dbias:
// in-order sums over chunks of rows, then the chunks in order), so the bits repeat.
// Device pointers; workspace of the *_workspace_bytes size; stream is a cudaStream_t.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/matmul_cuda.h"

namespace lt::cuda {

size_t linear_forward_workspace_bytes(int64_t M, int64_t K, int64_t N, GemmInput input, bool has_w_bf16);
void linear_forward(Gemm& gemm, float* y, const float* x, const float* w, const uint16_t* w_bf16, const float* bias,
                    int64_t M, int64_t K, int64_t N, GemmInput input, void* workspace, void* stream = nullptr);

size_t linear_backward_workspace_bytes(int64_t M, int64_t K, int64_t N, GemmInput input, bool has_w_bf16,
                                       bool has_dbias);
void linear_backward(Gemm& gemm, float* dx, float* dw, float* dbias, const float* dy, const float* x, const float* w,
                     const uint16_t* w_bf16, int64_t M, int64_t K, int64_t N, bool accumulate_dx, GemmInput input,
                     void* workspace, void* stream = nullptr);

size_t matmul_workspace_bytes(int64_t M, int64_t N, int64_t K, GemmInput input);
void matmul(Gemm& gemm, float* c, const float* a, bool trans_a, const float* b, bool trans_b, int64_t M, int64_t N,
            int64_t K, bool accumulate, GemmInput input, void* workspace, void* stream = nullptr);

}  // namespace lt::cuda
