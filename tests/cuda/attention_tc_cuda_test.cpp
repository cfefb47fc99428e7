// The tensor-core attention, forward and backward, on the GPU against float64 (the checks and their
// bounds: tests/kernels/attention_tc_checks.h; the same kernel runs on the CPU under the
// warp emulator in tests/kernels/attention_tc_emulated_test.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "cuda_test_util.h"
#include "kernels/attention_tc_checks.h"
#include "kernels/cuda/attention_tc_cuda.h"

namespace lt {
namespace {

using cuda::DeviceBuffer;
using cuda::to_device;
using cuda::to_host;
using test::TcCase;

DeviceBuffer nan_buffer(size_t n) { return to_device(std::vector<float>(n, NAN)); }

void run_on_gpu(std::vector<float>& o, std::vector<float>& lse, const std::vector<float>& q,
                const std::vector<float>& k, const std::vector<float>& v, const int32_t* doc, const TcCase& c) {
  const DeviceBuffer dq = to_device(q), dk = to_device(k), dv = to_device(v);
  const DeviceBuffer ddoc = doc ? to_device(std::vector<int32_t>(doc, doc + c.B * c.S)) : DeviceBuffer();
  // The outputs start as NaN: a value the kernel does not write shows (cudaMalloc would
  // likely hand back the previous run's blocks, and their values).
  const DeviceBuffer d_o = nan_buffer(o.size()), d_lse = nan_buffer(lse.size()),
                     ws(cuda::attention_forward_bf16_workspace_bytes(c.B, c.S, c.Hq, c.Hkv, c.D));
  cuda::attention_forward_bf16(d_o.as<float>(), d_lse.as<float>(), dq.as<float>(), dk.as<float>(), dv.as<float>(),
                               ws.data(), c.B, c.S, c.Hq, c.Hkv, c.D, test::case_scale(c),
                               doc ? ddoc.as<int32_t>() : nullptr, c.window);
  o = to_host<float>(d_o, o.size());
  lse = to_host<float>(d_lse, lse.size());
}

void run_backward_staged(bool column_passes, std::vector<float>& dq, std::vector<float>& dk, std::vector<float>& dv,
                         const std::vector<float>& dout, const std::vector<float>& q, const std::vector<float>& k,
                         const std::vector<float>& v, const std::vector<float>& o, const std::vector<float>& lse,
                         const int32_t* doc, const TcCase& c) {
  const DeviceBuffer ddo = to_device(dout), dq_in = to_device(q), dk_in = to_device(k), dv_in = to_device(v),
                     d_o = to_device(o), d_lse = to_device(lse);
  const DeviceBuffer ddoc = doc ? to_device(std::vector<int32_t>(doc, doc + c.B * c.S)) : DeviceBuffer();
  const DeviceBuffer d_dq = nan_buffer(dq.size()), d_dk = nan_buffer(dk.size()), d_dv = nan_buffer(dv.size());
  const DeviceBuffer ws(cuda::attention_backward_bf16_workspace_bytes(c.B, c.S, c.Hq, c.Hkv, c.D));
  cuda::attention_backward_bf16(d_dq.as<float>(), d_dk.as<float>(), d_dv.as<float>(), ddo.as<float>(),
                                dq_in.as<float>(), dk_in.as<float>(), dv_in.as<float>(), d_o.as<float>(),
                                d_lse.as<float>(), ws.data(), c.B, c.S, c.Hq, c.Hkv, c.D,
                                test::case_scale(c), doc ? ddoc.as<int32_t>() : nullptr, c.window, nullptr,
                                column_passes ? cuda::TcBackwardStaging::kColumnPasses
                                              : cuda::TcBackwardStaging::kFitToDevice);
  dq = to_host<float>(d_dq, dq.size());
  dk = to_host<float>(d_dk, dk.size());
  dv = to_host<float>(d_dv, dv.size());
}

void run_backward_on_gpu(std::vector<float>& dq, std::vector<float>& dk, std::vector<float>& dv,
                         const std::vector<float>& dout, const std::vector<float>& q, const std::vector<float>& k,
                         const std::vector<float>& v, const std::vector<float>& o, const std::vector<float>& lse,
                         const int32_t* doc, const TcCase& c) {
  run_backward_staged(false, dq, dk, dv, dout, q, k, v, o, lse, doc, c);
}

TEST(CudaKernels, TensorCoreAttentionForwardMatchesFloat64) {
  LT_REQUIRE_CUDA_DEVICE();
  test::check_forward({2, 67, 4, 2, 64, 0, false}, run_on_gpu);     // causal, GQA 2, a partial second tile
  test::check_forward({1, 200, 6, 2, 128, 40, false}, run_on_gpu);  // sliding window: tiles skipped, GQA 3
  test::check_forward({2, 150, 4, 4, 80, 0, true}, run_on_gpu);     // documents, D padded to 128
  test::check_forward({1, 130, 8, 1, 256, 9, true}, run_on_gpu);    // both, MQA, the largest head dim
  test::check_forward({1, 64, 2, 2, 32, 0, false}, run_on_gpu);     // one whole tile, D padded to 64
  test::check_forward({1, 1000, 2, 1, 128, 0, false}, run_on_gpu);  // 16 query blocks, 16 key tiles
}

TEST(CudaKernels, TensorCoreAttentionBackwardMatchesFloat64) {
  LT_REQUIRE_CUDA_DEVICE();
  test::check_backward({2, 67, 4, 2, 64, 0, false}, run_backward_on_gpu);     // causal, GQA 2, a partial tile
  test::check_backward({1, 200, 6, 2, 128, 40, false}, run_backward_on_gpu);  // sliding window, GQA 3
  test::check_backward({2, 150, 4, 4, 80, 0, true}, run_backward_on_gpu);     // documents, D padded to 128
  test::check_backward({1, 130, 8, 1, 256, 9, true}, run_backward_on_gpu);    // both, MQA, two column chunks
  test::check_backward({1, 600, 2, 1, 128, 0, false}, run_backward_on_gpu);   // 10 query and key tiles
}

// The column passes that GPUs with 99 KB of shared memory a block run at D 256 (Gemma 3), on
// this one's tensor cores: the bits of the whole-D kernels (on a GPU that would pick the
// passes itself, both runs are passes: said in the output).
TEST(CudaKernels, TensorCoreAttentionBackwardInColumnPassesGivesTheSameBits) {
  LT_REQUIRE_CUDA_DEVICE();
  test::check_column_passes_give_the_same_bits({1, 130, 8, 2, 256, 9, true}, run_backward_staged);
  test::check_column_passes_give_the_same_bits({2, 300, 4, 4, 200, 0, false}, run_backward_staged);
}

}  // namespace
}  // namespace lt
