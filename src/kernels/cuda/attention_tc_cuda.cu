#include "kernels/cuda/attention_tc_cuda.h"

#include <stdexcept>
#include <string>

#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/attention_tc_backward.cuh"
#include "kernels/cuda/attention_tc_forward.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/device_memory.h"

namespace lt::cuda {
namespace {

using tc::dkv_smem_bytes;
using tc::dkv_tc_kernel;
using tc::dq_smem_bytes;
using tc::dq_tc_kernel;
using tc::forward_smem_bytes;
using tc::forward_tc_kernel;
using tc::kChunk;
using tc::key_block_grid;
using tc::kThreads;
using tc::pack_kernel;
using tc::PackedOperands;
using tc::query_block_grid;
using tc::row_deltas_kernel;
using tc::TcGrid;
using tc::TcShape;

dim3 as_dim3(const TcGrid& g) { return dim3(g.x, g.y, g.z); }

// The most dynamic shared memory a block of the current device can take.
size_t shared_memory_per_block() {
  int device = 0, bytes = 0;
  LT_CUDA_CHECK(cudaGetDevice(&device));
  LT_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return static_cast<size_t>(bytes);
}

void require_shared_memory(const char* pass, int64_t D, size_t need, size_t have) {
  if (need <= have) return;
  throw std::runtime_error("attention " + std::string(pass) + " (cuda, bf16 tensor cores): head dim " +
                           std::to_string(D) + " needs " + std::to_string(need / 1024) +
                           " KB of shared memory a block, and " + device_description() + " gives " +
                           std::to_string(have / 1024) + " KB; run with --precision f32 (its attention kernel "
                           "needs less), or on a GPU with more (A100, H100)");
}

// x ([B*S, H, D] fp32) packed as bf16 into `to` (attention_tc_common.cuh).
template <int DP>
void pack(uint16_t* to, const float* x, int64_t H, const TcShape& s, cudaStream_t st) {
  pack_kernel<DP><<<as_dim3(key_block_grid(s, H)), kThreads, 0, st>>>(to, x, H, s);
  LT_CUDA_CHECK_LAUNCH(pack_kernel);
}

template <int DP>
void launch_forward(float* o, float* lse, const float* q, const float* k, const float* v, void* workspace,
                    const TcShape& s, cudaStream_t st) {
  constexpr int bytes = static_cast<int>(forward_smem_bytes<DP>());
  require_shared_memory("forward", s.D, bytes, shared_memory_per_block());
  LT_CUDA_CHECK(cudaFuncSetAttribute(forward_tc_kernel<DP>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  const PackedOperands p = tc::packed_operands(s, false);
  uint16_t *pq = PackedOperands::at(workspace, p.q), *pk = PackedOperands::at(workspace, p.k),
           *pv = PackedOperands::at(workspace, p.v);
  pack<DP>(pq, q, s.Hq, s, st);
  pack<DP>(pk, k, s.Hkv, s, st);
  pack<DP>(pv, v, s.Hkv, s, st);
  forward_tc_kernel<DP><<<as_dim3(query_block_grid(s, s.Hq)), kThreads, bytes, st>>>(o, lse, pq, pk, pv, s);
  LT_CUDA_CHECK_LAUNCH(forward_tc_kernel);
}

// The backward's operands, packed (pointers into its workspace).
struct PackedBackward {
  const uint16_t *dout, *q, *k, *v;
};

// have: the device's shared memory a block (shared_memory_per_block).
template <int DP, int kStage>
void launch_backward_staged(float* dq, float* dk, float* dv, const PackedBackward& in, const float* lse,
                            const float* row_deltas, const TcShape& s, cudaStream_t st, size_t have) {
  constexpr int kChunks = DP / kChunk<DP>;
  constexpr int dq_bytes = static_cast<int>(dq_smem_bytes<DP, kStage>());
  constexpr int dkv_bytes = static_cast<int>(dkv_smem_bytes<DP, kStage>());
  require_shared_memory("backward", s.D, dq_bytes > dkv_bytes ? dq_bytes : dkv_bytes, have);
  LT_CUDA_CHECK(
      cudaFuncSetAttribute(dq_tc_kernel<DP, kStage>, cudaFuncAttributeMaxDynamicSharedMemorySize, dq_bytes));
  LT_CUDA_CHECK(
      cudaFuncSetAttribute(dkv_tc_kernel<DP, kStage>, cudaFuncAttributeMaxDynamicSharedMemorySize, dkv_bytes));
  dq_tc_kernel<DP, kStage><<<as_dim3(query_block_grid(s, s.Hq * kChunks)), kThreads, dq_bytes, st>>>(
      dq, in.dout, in.q, in.k, in.v, lse, row_deltas, s);
  LT_CUDA_CHECK_LAUNCH(dq_tc_kernel);
  dkv_tc_kernel<DP, kStage><<<as_dim3(key_block_grid(s, s.Hkv * kChunks)), kThreads, dkv_bytes, st>>>(
      dk, dv, in.dout, in.q, in.k, in.v, lse, row_deltas, s);
  LT_CUDA_CHECK_LAUNCH(dkv_tc_kernel);
}

// Each row's delta and the packed operands, then whole-D tiles where the device's blocks
// hold them, else column passes (the same bits, attention_tc_backward.cuh).
template <int DP>
void launch_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                     const float* v, const float* o, const float* lse, void* workspace, const TcShape& s,
                     cudaStream_t st, TcBackwardStaging staging) {
  const PackedOperands p = tc::packed_operands(s, true);
  float* row_deltas = reinterpret_cast<float*>(PackedOperands::at(workspace, p.deltas));
  row_deltas_kernel<<<as_dim3(query_block_grid(s, s.Hq)), kThreads, 0, st>>>(row_deltas, dout, o, s);
  LT_CUDA_CHECK_LAUNCH(row_deltas_kernel);
  uint16_t *pdout = PackedOperands::at(workspace, p.dout), *pq = PackedOperands::at(workspace, p.q),
           *pk = PackedOperands::at(workspace, p.k), *pv = PackedOperands::at(workspace, p.v);
  pack<DP>(pdout, dout, s.Hq, s, st);
  pack<DP>(pq, q, s.Hq, s, st);
  pack<DP>(pk, k, s.Hkv, s, st);
  pack<DP>(pv, v, s.Hkv, s, st);
  const PackedBackward in{pdout, pq, pk, pv};
  const size_t have = shared_memory_per_block();
  const bool whole = dq_smem_bytes<DP>() <= have && dkv_smem_bytes<DP>() <= have;
  if (staging == TcBackwardStaging::kColumnPasses || !whole)
    launch_backward_staged<DP, kChunk<DP>>(dq, dk, dv, in, lse, row_deltas, s, st, have);
  else
    launch_backward_staged<DP, DP>(dq, dk, dv, in, lse, row_deltas, s, st, have);
}

TcShape make_tc_shape(int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                      const int32_t* doc_start, int64_t window) {
  const std::string what = "attention (cuda, bf16 tensor cores): ";
  if (D < 1 || D > kAttentionMaxHeadDimCuda)
    throw std::runtime_error(what + "head dim " + std::to_string(D) + " outside [1, " +
                             std::to_string(kAttentionMaxHeadDimCuda) + "]");
  if (Hkv < 1 || Hq % Hkv != 0)
    throw std::runtime_error(what + std::to_string(Hq) + " query heads are not a multiple of " +
                             std::to_string(Hkv) + " kv heads");
  if (2 * Hq > 65535 || B > 65535)  // the grids' y (heads x column chunks) and z
    throw std::runtime_error(what + std::to_string(B) + " rows of " + std::to_string(Hq) +
                             " heads: at most 65535 of each per call");
  return tc::tc_shape(B, S, Hq, Hkv, D, scale, doc_start, window);
}

}  // namespace

size_t attention_forward_bf16_workspace_bytes(int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D) {
  return tc::packed_operands(tc::tc_shape(B, S, Hq, Hkv, D, 1.f, nullptr, 0), false).bytes;
}

void attention_forward_bf16(float* o, float* lse, const float* q, const float* k, const float* v, void* workspace,
                            int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                            const int32_t* doc_start, int64_t window, void* stream) {
  const TcShape s = make_tc_shape(B, S, Hq, Hkv, D, scale, doc_start, window);
  if (B * S * Hq == 0) return;
  const cudaStream_t st = as_stream(stream);
  if (D <= 64) launch_forward<64>(o, lse, q, k, v, workspace, s, st);
  else if (D <= 128) launch_forward<128>(o, lse, q, k, v, workspace, s, st);
  else launch_forward<256>(o, lse, q, k, v, workspace, s, st);
}

size_t attention_backward_bf16_workspace_bytes(int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D) {
  return tc::packed_operands(tc::tc_shape(B, S, Hq, Hkv, D, 1.f, nullptr, 0), true).bytes;
}

void attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                             const float* v, const float* o, const float* lse, void* workspace, int64_t B, int64_t S,
                             int64_t Hq, int64_t Hkv, int64_t D, float scale, const int32_t* doc_start,
                             int64_t window, void* stream, TcBackwardStaging staging) {
  const TcShape s = make_tc_shape(B, S, Hq, Hkv, D, scale, doc_start, window);
  if (B * S * Hq == 0) return;
  const cudaStream_t st = as_stream(stream);
  if (D <= 64) launch_backward<64>(dq, dk, dv, dout, q, k, v, o, lse, workspace, s, st, staging);
  else if (D <= 128) launch_backward<128>(dq, dk, dv, dout, q, k, v, o, lse, workspace, s, st, staging);
  else launch_backward<256>(dq, dk, dv, dout, q, k, v, o, lse, workspace, s, st, staging);
}

}  // namespace lt::cuda
