// The kernel table's head cross-entropy entries on the GPU: kernels/kernel_table.h's
// contracts (head_cross_entropy_workspace_bytes, head_cross_entropy, _vocab_chunk, _stream)
// over device pointers, built on HeadCrossEntropyPasses (cross_entropy_cuda.h).
//  - Precision::BF16: x is rounded to bf16 once per call into the workspace, the head rows
//    are the bf16 copy where given, else rounded a sub-chunk at a time into the workspace
//    (as the CPU's bf16 path rounds them: the same bits); F32 reads the fp32 rows.
//  - The vocabulary sub-chunk is min(V, opt.vocab_chunk), halved until one sub-chunk's
//    logits for all T tokens (4 bytes each, 6 under BF16 with their bf16 gradient) fit in
//    opt.max_logit_bytes: the GPU kernels take every token at once.
//  - The loss comes back to the host (a copy and a wait on the stream), as the CPU's does.
//  - Targets are device ids, checked on the host where they come from (layers/step_batch.h);
//    an id outside [0, V) other than -100 counts as ignored here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/kernel_table.h"

namespace lt::cuda {

class Gemm;

int64_t table_head_vocab_chunk(int64_t T, int64_t V, Precision p, const CrossEntropyOptions& opt = {});
size_t table_head_workspace_bytes(int64_t T, int64_t C, int64_t V, Precision p, bool streamed,
                                  const CrossEntropyOptions& opt);
double table_head_cross_entropy(Gemm& gemm, float* dx, float* dw, const float* x, const float* w, const bf16* w_bf16,
                                const int32_t* targets, int64_t T, int64_t C, int64_t V, float grad_scale, Precision p,
                                const CrossEntropyOptions& opt, void* workspace, void* stream);
std::unique_ptr<HeadCrossEntropyStream> table_head_stream(Gemm& gemm, const float* x, const int32_t* targets,
                                                          int64_t T, int64_t C, int64_t V, float grad_scale,
                                                          Precision p, const CrossEntropyOptions& opt,
                                                          void* workspace, void* stream);

}  // namespace lt::cuda
