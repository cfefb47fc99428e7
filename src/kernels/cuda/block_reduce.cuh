// Sums (and maxima) across a thread block in a fixed order (warp shuffles, then warp 0 over the warps'
// sums), so a result depends on the block size and the data only, never on scheduling.
// Included by .cu files only.
#pragma once

namespace lt::cuda {

template <typename T>
__device__ inline T warp_sum(T v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Every thread gets the block's sum. blockDim.x is a multiple of 32, at most 1024;
// scratch holds 32 values. Safe to call again right after (it syncs before reusing scratch).
template <typename T>
__device__ inline T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T s = lane < warps ? scratch[lane] : T(0);
  return warp_sum(s);
}

template <typename T>
__device__ inline T warp_max(T v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Every thread gets the block's maximum (the same shape as block_sum).
template <typename T>
__device__ inline T block_max(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T s = lane < warps ? scratch[lane] : T(-INFINITY);
  return warp_max(s);
}

}  // namespace lt::cuda
