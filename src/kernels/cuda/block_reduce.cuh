// Sums (and maxima) across a thread block in a fixed order (warp shuffles, then warp 0 over the warps'
// sums), so a result depends on the block size and the data only, never on scheduling.
// Included by .cu files only.
#pragma once

namespace lt::cuda {

struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  template <typename T>
  __device__ T operator()(T a, T b) const { return fmax(a, b); }
};

template <typename T, typename Op>
__device__ inline T warp_reduce(T v, Op op) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Every thread gets the block's reduction. blockDim.x is a multiple of 32, at most 1024;
// scratch holds 32 values; identity fills the lanes past the last warp. Safe to call
// again right after (it syncs before reusing scratch).
template <typename T, typename Op>
__device__ inline T block_reduce(T v, T* scratch, Op op, T identity) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_reduce(v, op);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_reduce(lane < warps ? scratch[lane] : identity, op);
}

template <typename T>
__device__ inline T warp_sum(T v) { return warp_reduce(v, SumOp{}); }
template <typename T>
__device__ inline T block_sum(T v, T* scratch) { return block_reduce(v, scratch, SumOp{}, T(0)); }
template <typename T>
__device__ inline T block_max(T v, T* scratch) { return block_reduce(v, scratch, MaxOp{}, T(-INFINITY)); }

}  // namespace lt::cuda
