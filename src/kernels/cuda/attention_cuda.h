// Causal grouped-query attention on the GPU, fp32, with the contract of
// kernels/cpu/attention.h: q [B*S, Hq, D], k and v [B*S, Hkv, D], o [B*S, Hq, D],
// lse [B, Hq, S]; query head h reads kv head h / (Hq / Hkv); query i sees keys
// first_key(i) <= j <= i, where first_key is its document's start (doc_start, optional,
// [B*S], runs of documents as valid_doc_starts requires) and, with window > 0, the later of
// that and i - window + 1. Backward recomputes the probabilities from the saved lse;
// dq, dk, dv overwrite. D is at most kAttentionMaxHeadDimCuda.
//
// This is the correctness-first kernel: one warp per query row (forward, dq) or per key
// row (dk, dv), each lane holding D/32 of the row in registers, an online softmax over the
// keys in order, fp32 on the CUDA cores. Every sum has one order (the keys or queries in
// index order, the group's query heads in order, the warp's fixed shuffle tree), so the
// bits repeat run to run and need no atomics. The tensor-core kernels beside it
// (attention_tc_cuda.h, bf16 operands) are the fast path.
// Device pointers; stream is a cudaStream_t (null: the default stream).
#pragma once

#include <cstdint>

namespace lt::cuda {

inline constexpr int64_t kAttentionMaxHeadDimCuda = 256;

void attention_forward(float* o, float* lse, const float* q, const float* k, const float* v, int64_t B, int64_t S,
                       int64_t Hq, int64_t Hkv, int64_t D, float scale, const int32_t* doc_start = nullptr,
                       int64_t window = 0, void* stream = nullptr);
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* o, const float* lse, int64_t B, int64_t S, int64_t Hq,
                        int64_t Hkv, int64_t D, float scale, const int32_t* doc_start = nullptr, int64_t window = 0,
                        void* stream = nullptr);

}  // namespace lt::cuda
