// Causal grouped-query attention on the GPU's tensor cores, bf16 operands with fp32
// accumulation: the fast path beside the fp32 kernel of attention_cuda.h, with its
// contract (shapes, layouts, doc_start, window, the saved lse) except for precision:
// q, k and v are rounded to bf16 (nearest even) before the products, and so are the
// probabilities before they weight v, as flash attention does under bf16 training; the
// scores, the online softmax, its row sums and the output sums stay fp32. The backward
// rounds dout too, and the probabilities and score gradients before their products
// (attention_tc_backward.cuh).
//
// Flash-attention-2 tiling: a block of 4 warps takes 64 query rows of one head (each warp
// 16 rows) and walks the key tiles (64 keys) that its rows can see, skipping the others;
// q, k and v are packed as bf16 once, into the workspace, and their tiles staged from there
// into shared memory by cp.async, each while the block computes with the tile before it
// (row-major, once each: the products that sum over keys read their B fragments down the
// rows, ldmatrix and ldmatrix.trans), the products run as mma.sync m16n8k16 (sm_80 and
// later), and each warp keeps its scores, probabilities and output rows in registers (the
// PTX ISA's documented fragment layouts), so no score matrix is written anywhere. D is
// padded with zeros to 64, 128 or 256 as it is packed.
// Bits repeat run to run (no atomics, one order); they differ from attention_cuda.h's.
// Shared memory a block (KB, D padded to 64 / 128 / 256): forward 27 / 51 / 99, backward
// 37 / 69 / 133, or 69 at D 256 in column passes, which the launcher picks where a block
// gets less (consumer GPUs: 99 KB). So every head dim runs on every GPU from sm_80 on.
//
// The CUDA kernel table runs these under Precision::BF16 and the fp32 kernel under F32.
// Status: compiled, not yet run on a GPU (none was lent when it was written).
// tests/cuda/attention_tc_cuda_test.cpp checks it against float64 where a GPU is;
// tests/kernels/attention_tc_emulated_test.cpp runs the same kernel code on the CPU under
// a warp emulator, against the same bounds.
// Device pointers; stream is a cudaStream_t (null: the default stream).
#pragma once

#include <cstddef>
#include <cstdint>

namespace lt::cuda {

// workspace: attention_forward_bf16_workspace_bytes(B, S, Hq, Hkv, D) of device memory (q,
// k and v packed as bf16 before the attention reads them), free for other use once the
// stream has run the call.
size_t attention_forward_bf16_workspace_bytes(int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D);
void attention_forward_bf16(float* o, float* lse, const float* q, const float* k, const float* v, void* workspace,
                            int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                            const int32_t* doc_start = nullptr, int64_t window = 0, void* stream = nullptr);
// How the backward stages its tiles: whole-D where the device's blocks hold them, else in
// column passes (D above 128 on a GPU with less than 133 KB a block: RTX 30xx/40xx/50xx);
// kColumnPasses asks for the passes anyway (tests: they must give the same bits).
enum class TcBackwardStaging { kFitToDevice, kColumnPasses };

// dq, dk, dv (overwritten) from dout and the forward's o and lse; dout is rounded to bf16
// as q, k and v are (attention_tc_backward.cuh says where else the backward rounds).
// workspace: attention_backward_bf16_workspace_bytes(B, S, Hq, Hkv, D) of device memory
// (each row's delta; q, k, v and dout packed), free for other use once the stream has run
// the call.
size_t attention_backward_bf16_workspace_bytes(int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D);
void attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                             const float* v, const float* o, const float* lse, void* workspace, int64_t B, int64_t S,
                             int64_t Hq, int64_t Hkv, int64_t D, float scale, const int32_t* doc_start = nullptr,
                             int64_t window = 0, void* stream = nullptr,
                             TcBackwardStaging staging = TcBackwardStaging::kFitToDevice);

}  // namespace lt::cuda
