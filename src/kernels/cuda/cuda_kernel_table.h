// The CUDA kernel table: the kernels of this folder behind kernels/kernel_table.h's
// entries, each with its CPU entry's signature and contract over device pointers, run on
// the stream set_kernel_table_stream() names (the cuda backend's compute stream).
//
// In the table so far: embedding, RMSNorm and its gated form, RoPE, attention, SwiGLU,
// GeGLU, the linear layers and matmul (cuBLASLt, one handle for the table, loaded at the
// first product), the causal conv1d, the gated delta rule and its gates, the float64 sum
// of squares (returned to the host, so it waits for the stream), fp32 -> bf16 and the
// block's elementwise steps (kernels/cuda/elementwise_cuda.h), and the head's
// cross-entropy whole and streamed (kernels/cuda/head_cross_entropy_table.h). Entries
// whose CPU signature has no workspace (the embedding's, RMSNorm's and the conv's backward,
// the linear layers' bf16 roundings of their operands and dbias partials, the bf16
// attention's packed operands and its backward's row deltas) take their scratch from CUDA's stream-ordered pool
// (cudaMallocAsync), outside the plan's arena.
#pragma once

#include "kernels/kernel_table.h"

namespace lt::cuda {

// A cudaStream_t; null: the default stream. Process-wide: one cuda backend at a time.
void set_kernel_table_stream(void* stream);
// Back to the default stream, unless another stream has been set since `stream` (a backend
// going away must not take the stream of one that came after it).
void release_kernel_table_stream(void* stream);
const KernelTable& kernel_table();

}  // namespace lt::cuda
