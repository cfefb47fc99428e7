#include "kernels/cuda/embedding_cuda.h"

#include <cub/device/device_radix_sort.cuh>

#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.cuh"

namespace lt::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void embedding_forward_kernel(float* out, const int32_t* tokens, const float* table, int64_t V, int64_t C) {
  const int64_t t = blockIdx.x;
  const int32_t id = tokens[t];
  if (id < 0 || id >= V) return;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) out[t * C + c] = table[id * C + c];
}

__global__ void iota_kernel(int32_t* v, int64_t n) {
  LT_GRID_STRIDE(i, n)
    v[i] = static_cast<int32_t>(i);
}

// Block i owns sorted entry i when it starts a run of one token id: it walks the run (its
// positions ascend: the sort is stable) and adds each row onto the table's.
__global__ void embedding_backward_kernel(float* dtable, const int32_t* ids, const int32_t* pos, const float* dout,
                                          int64_t T, int64_t V, int64_t C) {
  const int64_t i = blockIdx.x;
  const int32_t id = ids[i];
  if ((i > 0 && ids[i - 1] == id) || id < 0 || id >= V) return;
  int64_t end = i + 1;
  while (end < T && ids[end] == id) ++end;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = dtable[id * C + c];
    for (int64_t k = i; k < end; ++k) acc += dout[static_cast<int64_t>(pos[k]) * C + c];
    dtable[id * C + c] = acc;
  }
}

struct Scratch {  // the workspace, cut up
  int32_t *ids_out, *pos_in, *pos_out;
  void* sort_temp;
  size_t sort_bytes;
};

size_t sort_temp_bytes(int64_t T) {
  size_t bytes = 0;
  LT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                                static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                static_cast<int32_t*>(nullptr), static_cast<int>(T)));
  return bytes;
}

Scratch cut(void* workspace, int64_t T) {
  char* p = static_cast<char*>(workspace);
  const size_t ints = align_workspace(static_cast<size_t>(T) * sizeof(int32_t));
  return {reinterpret_cast<int32_t*>(p), reinterpret_cast<int32_t*>(p + ints),
          reinterpret_cast<int32_t*>(p + 2 * ints), p + 3 * ints, sort_temp_bytes(T)};
}

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* table, int64_t T, int64_t V, int64_t C,
                       void* stream) {
  if (T == 0) return;
  embedding_forward_kernel<<<static_cast<unsigned>(T), kThreads, 0, as_stream(stream)>>>(out, tokens, table, V, C);
  LT_CUDA_CHECK_LAUNCH(embedding_forward_kernel);
}

size_t embedding_backward_workspace_bytes(int64_t T) {
  return 3 * align_workspace(static_cast<size_t>(T) * sizeof(int32_t)) + sort_temp_bytes(T);
}

void embedding_backward(float* dtable, const int32_t* tokens, const float* dout, int64_t T, int64_t V, int64_t C,
                        void* workspace, void* stream) {
  if (T == 0) return;
  if (T > INT32_MAX) throw std::runtime_error("embedding_backward (cuda): " + std::to_string(T) + " tokens, at most 2^31-1");
  const cudaStream_t s = as_stream(stream);
  Scratch w = cut(workspace, T);
  iota_kernel<<<grid_for(T, kThreads), kThreads, 0, s>>>(w.pos_in, T);
  LT_CUDA_CHECK_LAUNCH(iota_kernel);
  // All 32 bits: an id outside [0, V) (skipped below) then still sorts apart from the valid
  // ones, so no valid id's run is split in two.
  LT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(w.sort_temp, w.sort_bytes, tokens, w.ids_out, w.pos_in, w.pos_out,
                                                static_cast<int>(T), 0, 32, s));
  embedding_backward_kernel<<<static_cast<unsigned>(T), kThreads, 0, s>>>(dtable, w.ids_out, w.pos_out, dout, T, V,
                                                                          C);
  LT_CUDA_CHECK_LAUNCH(embedding_backward_kernel);
}

}  // namespace lt::cuda
