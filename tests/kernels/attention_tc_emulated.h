// The tensor-core attention's kernels (kernels/cuda/attention_tc_{forward,backward}.cuh)
// run on the CPU under the warp emulator, with attention_tc_cuda.h's signatures over host
// pointers: for tests that check the kernels' logic (attention_tc_emulated_test.cpp) and
// what their bf16 arithmetic does to training (exec/streaming_cuda_test.cpp).
// A test file that includes this needs -Wno-unknown-pragmas under GCC (tests/CMakeLists.txt).
#pragma once

#include "kernels/warp_emulator.h"  // first: it stands in for CUDA in the kernels' headers

#include "kernels/cuda/attention_tc_backward.cuh"
#include "kernels/cuda/attention_tc_forward.cuh"

#include <vector>

namespace lt::test {

namespace emulated_detail {

// Runs kernel(args...) over a grid of the launcher's (attention_tc_common.cuh: TcGrid).
template <class Kernel, class... Args>
void launch(const cuda::tc::TcGrid& g, size_t smem_bytes, Kernel kernel, Args... args) {
  emu::launch(g.x, g.y, g.z, cuda::tc::kThreads, smem_bytes, kernel, args...);
}

// The launcher's workspace (attention_tc_common.cuh: PackedOperands), 16-byte aligned as
// the GPU's allocations are (at least).
struct Workspace {
  struct alignas(16) Piece {
    unsigned char bytes[16];
  };
  explicit Workspace(size_t bytes) : pieces((bytes + 15) / 16) {}
  void* data() { return pieces.data(); }
  std::vector<Piece> pieces;
};

// Packs the job's operands (and dO's deltas) as the launcher does.
template <int DP>
cuda::tc::PackJob pack(Workspace& ws, const cuda::tc::TcShape& s, const float* q, const float* k, const float* v,
                       const float* dout = nullptr, const float* o = nullptr) {
  const cuda::tc::PackJob job = cuda::tc::pack_job(ws.data(), s, q, k, v, dout, o);
  launch(cuda::tc::key_block_grid(s, job.total_heads()), 0, &cuda::tc::pack_kernel<DP>, job, s);
  return job;
}

template <int DP>
void forward(float* o, float* lse, const float* q, const float* k, const float* v, const cuda::tc::TcShape& s) {
  Workspace ws(cuda::tc::packed_operands(s, false).bytes);
  using J = cuda::tc::PackJob;
  const J job = pack<DP>(ws, s, q, k, v);
  launch(cuda::tc::query_block_grid(s, s.Hq), cuda::tc::forward_smem_bytes<DP>(), &cuda::tc::forward_tc_kernel<DP>,
         o, lse, job.to[J::kQ], job.to[J::kK], job.to[J::kV], s);
}

template <int DP, int kStage>
void backward_staged(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                     const float* v, const float* o, const float* lse, const cuda::tc::TcShape& s) {
  constexpr int chunks = DP / cuda::tc::kChunk<DP>;
  Workspace ws(cuda::tc::packed_operands(s, true).bytes);
  using J = cuda::tc::PackJob;
  const J job = pack<DP>(ws, s, q, k, v, dout, o);
  const uint16_t *pdout = job.to[J::kDout], *pq = job.to[J::kQ], *pk = job.to[J::kK], *pv = job.to[J::kV];
  const float* deltas = job.deltas;
  launch(cuda::tc::query_block_grid(s, s.Hq * chunks), cuda::tc::dq_smem_bytes<DP, kStage>(),
         &cuda::tc::dq_tc_kernel<DP, kStage>, dq, pdout, pq, pk, pv, lse, deltas, s);
  launch(cuda::tc::key_block_grid(s, s.Hkv * chunks), cuda::tc::dkv_smem_bytes<DP, kStage>(),
         &cuda::tc::dkv_tc_kernel<DP, kStage>, dk, dv, pdout, pq, pk, pv, lse, deltas, s);
}
template <int DP>
void backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k, const float* v,
              const float* o, const float* lse, const cuda::tc::TcShape& s, bool column_passes) {
  if (column_passes) backward_staged<DP, cuda::tc::kChunk<DP>>(dq, dk, dv, dout, q, k, v, o, lse, s);
  else backward_staged<DP, DP>(dq, dk, dv, dout, q, k, v, o, lse, s);
}

}  // namespace emulated_detail

inline void emulated_attention_forward_bf16(float* o, float* lse, const float* q, const float* k, const float* v,
                                            int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                                            const int32_t* doc_start, int64_t window) {
  const cuda::tc::TcShape s = cuda::tc::tc_shape(B, S, Hq, Hkv, D, scale, doc_start, window);
  if (D <= 64) emulated_detail::forward<64>(o, lse, q, k, v, s);
  else if (D <= 128) emulated_detail::forward<128>(o, lse, q, k, v, s);
  else emulated_detail::forward<256>(o, lse, q, k, v, s);
}

// column_passes: the kernels that stage kChunk columns at a time, as they run where a block
// gets too little shared memory for whole-D tiles (attention_tc_backward.cuh); the same
// as the others below D 129.
inline void emulated_attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const float* q,
                                             const float* k, const float* v, const float* o, const float* lse,
                                             int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                                             const int32_t* doc_start, int64_t window, bool column_passes = false) {
  const cuda::tc::TcShape s = cuda::tc::tc_shape(B, S, Hq, Hkv, D, scale, doc_start, window);
  if (D <= 64) emulated_detail::backward<64>(dq, dk, dv, dout, q, k, v, o, lse, s, column_passes);
  else if (D <= 128) emulated_detail::backward<128>(dq, dk, dv, dout, q, k, v, o, lse, s, column_passes);
  else emulated_detail::backward<256>(dq, dk, dv, dout, q, k, v, o, lse, s, column_passes);
}

}  // namespace lt::test
