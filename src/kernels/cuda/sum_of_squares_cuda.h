// The sum of squares of n values, in float64, on the GPU: the squared gradient norm,
// accumulated on the device as gradients are produced (out += the sum, so one device
// double can gather a whole step's norm with no host round trip).
//
// Order, fixed by n alone: the input is cut into chunks of kSumOfSquaresChunkCuda values;
// in a chunk, thread k of 256 adds x[i]^2 for i = k mod 256 in index order, the threads
// are added by the block's fixed warp-shuffle tree; the chunk sums are then added the same
// way by one block (thread k takes chunks k mod 256 in order), and that onto *out. Each
// x^2 is exact in float64 (24 + 24 bits < 53), so only that order rounds.
// Device pointers; stream is a cudaStream_t (null: the default stream).
#pragma once

#include <cstddef>
#include <cstdint>

namespace lt::cuda {

inline constexpr int64_t kSumOfSquaresChunkCuda = int64_t{1} << 16;

size_t sum_of_squares_workspace_bytes(int64_t n);
// x is fp32.
void sum_of_squares_f64(double* out, const float* x, int64_t n, void* workspace, void* stream = nullptr);
// x is bf16 (bits).
void sum_of_squares_f64_bf16(double* out, const uint16_t* x, int64_t n, void* workspace, void* stream = nullptr);

}  // namespace lt::cuda
