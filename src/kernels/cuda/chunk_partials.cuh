// The last step of a fixed-order column reduction (the dw of the norms and the conv): each
// chunk of rows has left its column sums in partial [chunks, cols]; they are added onto
// dst in chunk order, dst[c] += partial[0, c] + partial[1, c] + ..., so the bits never
// depend on scheduling. Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lt::cuda {

void add_chunk_partials(float* dst, const float* partial, int64_t chunks, int64_t cols, cudaStream_t stream);

}  // namespace lt::cuda
