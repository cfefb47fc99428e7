// Error handling and launch shapes shared by the CUDA kernels (included by .cu files only).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace lt::cuda {

// Throws std::runtime_error naming the call, the file and line, and CUDA's message.
[[noreturn]] void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line);

#define LT_CUDA_CHECK(call)                                                           \
  do {                                                                                \
    const cudaError_t lt_cuda_err_ = (call);                                          \
    if (lt_cuda_err_ != cudaSuccess)                                                  \
      ::lt::cuda::throw_cuda_error(lt_cuda_err_, #call, __FILE__, __LINE__);          \
  } while (0)

// After a <<<>>> launch: a bad configuration is reported here, not at the next sync.
#define LT_CUDA_CHECK_LAUNCH(kernel) LT_CUDA_CHECK(cudaPeekAtLastError())

// for (i = this thread's first item; i < n; i += the grid's thread count)
#define LT_GRID_STRIDE(i, n)                                                              \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Workspace pieces start on 256-byte boundaries (cudaMalloc's own alignment).
inline size_t align_workspace(size_t bytes) { return (bytes + 255) / 256 * 256; }

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// Blocks for a grid-stride loop over n items: enough to fill the GPU, few enough that the
// grid's x dimension never overflows.
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t want = (n + threads - 1) / threads;
  return static_cast<unsigned>(want < 1 ? 1 : (want > 65535 * 8 ? 65535 * 8 : want));
}

}  // namespace lt::cuda
