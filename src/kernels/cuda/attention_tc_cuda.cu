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
using tc::PackJob;
using tc::query_block_grid;
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

// The job's operands packed as bf16 into the workspace (attention_tc_common.cuh).
template <int DP>
void pack(const PackJob& job, const TcShape& s, cudaStream_t st) {
  pack_kernel<DP><<<as_dim3(key_block_grid(s, job.total_heads())), kThreads, 0, st>>>(job, s);
  LT_CUDA_CHECK_LAUNCH(pack_kernel);
}

template <int DP>
void launch_forward(float* o, float* lse, const float* q, const float* k, const float* v, void* workspace,
                    const TcShape& s, cudaStream_t st) {
  constexpr int bytes = static_cast<int>(forward_smem_bytes<DP>());
  require_shared_memory("forward", s.D, bytes, shared_memory_per_block());
  LT_CUDA_CHECK(cudaFuncSetAttribute(forward_tc_kernel<DP>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  const PackJob job = tc::pack_job(workspace, s, q, k, v);
  pack<DP>(job, s, st);
  forward_tc_kernel<DP><<<as_dim3(query_block_grid(s, s.Hq)), kThreads, bytes, st>>>(
      o, lse, job.to[PackJob::kQ], job.to[PackJob::kK], job.to[PackJob::kV], s);
  LT_CUDA_CHECK_LAUNCH(forward_tc_kernel);
}

// have: the device's shared memory a block (shared_memory_per_block).
template <int DP, int kStage>
void launch_backward_staged(float* dq, float* dk, float* dv, const PackJob& in, const float* lse, const TcShape& s,
                            cudaStream_t st, size_t have) {
  const uint16_t *dout = in.to[PackJob::kDout], *q = in.to[PackJob::kQ], *k = in.to[PackJob::kK],
                 *v = in.to[PackJob::kV];
  constexpr int kChunks = DP / kChunk<DP>;
  constexpr int dq_bytes = static_cast<int>(dq_smem_bytes<DP, kStage>());
  constexpr int dkv_bytes = static_cast<int>(dkv_smem_bytes<DP, kStage>());
  require_shared_memory("backward", s.D, dq_bytes > dkv_bytes ? dq_bytes : dkv_bytes, have);
  LT_CUDA_CHECK(
      cudaFuncSetAttribute(dq_tc_kernel<DP, kStage>, cudaFuncAttributeMaxDynamicSharedMemorySize, dq_bytes));
  LT_CUDA_CHECK(
      cudaFuncSetAttribute(dkv_tc_kernel<DP, kStage>, cudaFuncAttributeMaxDynamicSharedMemorySize, dkv_bytes));
  dq_tc_kernel<DP, kStage><<<as_dim3(query_block_grid(s, s.Hq * kChunks)), kThreads, dq_bytes, st>>>(
      dq, dout, q, k, v, lse, in.deltas, s);
  LT_CUDA_CHECK_LAUNCH(dq_tc_kernel);
  dkv_tc_kernel<DP, kStage><<<as_dim3(key_block_grid(s, s.Hkv * kChunks)), kThreads, dkv_bytes, st>>>(
      dk, dv, dout, q, k, v, lse, in.deltas, s);
  LT_CUDA_CHECK_LAUNCH(dkv_tc_kernel);
}

// The packed operands and each row's delta, then whole-D tiles where the device's blocks
// hold them, else column passes (the same bits, attention_tc_backward.cuh).
template <int DP>
void launch_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                     const float* v, const float* o, const float* lse, void* workspace, const TcShape& s,
                     cudaStream_t st, TcBackwardStaging staging) {
  const PackJob job = tc::pack_job(workspace, s, q, k, v, dout, o);
  pack<DP>(job, s, st);
  const size_t have = shared_memory_per_block();
  const bool whole = dq_smem_bytes<DP>() <= have && dkv_smem_bytes<DP>() <= have;
  if (staging == TcBackwardStaging::kColumnPasses || !whole)
    launch_backward_staged<DP, kChunk<DP>>(dq, dk, dv, job, lse, s, st, have);
  else
    launch_backward_staged<DP, DP>(dq, dk, dv, job, lse, s, st, have);
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
  if (4 * Hq > 65535 || B > 65535)  // the grids' y (the packing's heads: at most 2 Hq + 2 Hkv) and z
    throw std::runtime_error(what + std::to_string(B) + " rows of " + std::to_string(Hq) +
                             " query heads: at most 65535 rows and 16383 heads per call");
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
