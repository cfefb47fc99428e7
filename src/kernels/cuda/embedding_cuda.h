// Token embedding on the GPU, fp32, with the contract of kernels/cpu/embedding.h: table is
// [V, C], out [T, C]; forward overwrites out; backward accumulates (+=) into dtable.
// Token ids must lie in [0, V): the caller checks them on the host, where they come from
// (the data loader), since a kernel cannot throw; an id outside is skipped here, never
// read or written out of bounds.
// Backward is deterministic without float atomics: the (token, position) pairs are sorted
// by token (a stable radix sort), and each distinct token's row adds its positions' rows
// in position order, one at a time, onto dtable's row: the CPU kernel's order, so the
// same bits as it.
// Device pointers; stream is a cudaStream_t (null: the default stream).
#pragma once

#include <cstddef>
#include <cstdint>

namespace lt::cuda {

void embedding_forward(float* out, const int32_t* tokens, const float* table, int64_t T, int64_t V, int64_t C,
                       void* stream = nullptr);

// Device scratch backward needs (the sorted pairs and the sort's own).
size_t embedding_backward_workspace_bytes(int64_t T);
void embedding_backward(float* dtable, const int32_t* tokens, const float* dout, int64_t T, int64_t V, int64_t C,
                        void* workspace, void* stream = nullptr);

}  // namespace lt::cuda
