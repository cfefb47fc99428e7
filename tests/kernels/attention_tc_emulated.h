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

// The grids of attention_tc_cuda.cu's launches: blocks of 64 query rows (forward, the row
// deltas, dq) or of 64 keys (dk/dv).
inline unsigned query_blocks(const cuda::tc::TcShape& s) {
  return static_cast<unsigned>((s.S + cuda::tc::kBlockRows - 1) / cuda::tc::kBlockRows);
}
inline unsigned key_blocks(const cuda::tc::TcShape& s) {
  return static_cast<unsigned>((s.S + cuda::tc::kKeyTile - 1) / cuda::tc::kKeyTile);
}

template <int DP>
void forward(float* o, float* lse, const float* q, const float* k, const float* v, const cuda::tc::TcShape& s) {
  emu::launch(query_blocks(s), static_cast<unsigned>(s.Hq), static_cast<unsigned>(s.B), cuda::tc::kThreads,
              cuda::tc::forward_smem_bytes<DP>(), &cuda::tc::forward_tc_kernel<DP>, o, lse, q, k, v, s);
}

template <int DP, int kStage>
void backward_staged(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                     const float* v, const float* o, const float* lse, const cuda::tc::TcShape& s) {
  constexpr unsigned chunks = DP / cuda::tc::kChunk<DP>;
  std::vector<float> row_deltas(static_cast<size_t>(s.B * s.Hq * s.S));
  emu::launch(query_blocks(s), static_cast<unsigned>(s.Hq), static_cast<unsigned>(s.B), cuda::tc::kThreads, 0,
              &cuda::tc::row_deltas_kernel, row_deltas.data(), dout, o, s);
  const float* deltas = row_deltas.data();
  emu::launch(query_blocks(s), static_cast<unsigned>(s.Hq) * chunks, static_cast<unsigned>(s.B), cuda::tc::kThreads,
              cuda::tc::dq_smem_bytes<DP, kStage>(), &cuda::tc::dq_tc_kernel<DP, kStage>, dq, dout, q, k, v, lse,
              deltas, s);
  emu::launch(key_blocks(s), static_cast<unsigned>(s.Hkv) * chunks, static_cast<unsigned>(s.B), cuda::tc::kThreads,
              cuda::tc::dkv_smem_bytes<DP, kStage>(), &cuda::tc::dkv_tc_kernel<DP, kStage>, dk, dv, dout, q, k, v, lse,
              deltas, s);
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
  const cuda::tc::TcShape s{B, S, Hq, Hkv, D, scale, doc_start, window};
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
  const cuda::tc::TcShape s{B, S, Hq, Hkv, D, scale, doc_start, window};
  if (D <= 64) emulated_detail::backward<64>(dq, dk, dv, dout, q, k, v, o, lse, s, column_passes);
  else if (D <= 128) emulated_detail::backward<128>(dq, dk, dv, dout, q, k, v, o, lse, s, column_passes);
  else emulated_detail::backward<256>(dq, dk, dv, dout, q, k, v, o, lse, s, column_passes);
}

}  // namespace lt::test
