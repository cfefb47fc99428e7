// The streamed training step on the cuda backend against the CPU's (issue 27, part 5):
// five steps with AdamW between them under plans that keep, recompute and offload, in
// fp32 and bf16 matmuls, on the dense and the Qwen3.5 hybrid tiny models.
//
// The GPU's kernels sum in other orders than the CPU's and their exp/log differ by ulps,
// so the two backends agree within a bound, not bitwise. The bound is derived, not tuned:
// the distance between the CPU's own fp32 and bf16 runs of the same training (bf16's
// rounding of every matmul input, at this model's magnitudes, through five steps). A
// cuda run, in either precision, must be closer to the CPU run of its precision than that:
// its differences are fp32 summation orders and a few ulps, three or more orders of
// magnitude below bf16's 2^-8, while a wrong kernel (a missed mask, a wrong index, a race)
// moves results by the size of the results. The CPU's bf16 run is the GPU's arithmetic:
// bf16 matmul inputs and, since the CUDA table's bf16 attention runs on tensor cores with
// bf16 operands (kernels/cuda/attention_tc_cuda.h), that attention, its very kernels run
// on the CPU under the warp emulator (tests/kernels/attention_tc_emulated.h). The CPU's
// fp32 attention would not do: the tensor cores' bf16 probabilities alone move the hybrid
// model's losses by more than all its matmul roundings (StreamingCudaYardstick below).
// Measured: the losses, the first step's
// gradients (before any update) and the final parameters, each as an L2 distance; the
// compute tier's peak stays within the plan's (run_streaming checks it every step).
//
// Without a GPU (or without CUDA in the build) it skips, saying so; scripts/gpu_check.sh
// runs it on a GPU machine.
#include "kernels/attention_tc_emulated.h"  // first: the warp emulator stands in for CUDA

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "exec/backend_cuda.h"
#include "exec/table_backend.h"
#include "streaming_trajectory.h"
#include "test_util.h"

namespace lt {
namespace {

using namespace streaming_test;

double l2_distance(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(s);
}

double loss_distance(const Trajectory& a, const Trajectory& b) {
  double s = 0;
  for (size_t i = 0; i < a.loss.size(); ++i) s += (a.loss[i] - b.loss[i]) * (a.loss[i] - b.loss[i]);
  return std::sqrt(s);
}

// run is within the CPU's bf16-vs-fp32 distance (cpu16 to cpu32) of ref on every measure.
void expect_within_bf16_distance(const Trajectory& run, const Trajectory& ref, const Trajectory& cpu32,
                                 const Trajectory& cpu16, const std::string& what) {
  ASSERT_EQ(run.loss.size(), ref.loss.size()) << what;
  const double loss_bound = loss_distance(cpu16, cpu32);
  const double grad_bound = l2_distance(cpu16.grads[0], cpu32.grads[0]);
  const double param_bound = l2_distance(cpu16.final_params, cpu32.final_params);
  // The yardstick must itself be a difference, or the bound says nothing.
  ASSERT_GT(loss_bound, 0) << what;
  ASSERT_GT(grad_bound, 0) << what;
  ASSERT_GT(param_bound, 0) << what;
  const double loss_d = loss_distance(run, ref), grad_d = l2_distance(run.grads[0], ref.grads[0]),
               param_d = l2_distance(run.final_params, ref.final_params);
  std::printf("%s: losses %.3g (bound %.3g), first gradients %.3g (bound %.3g), final parameters %.3g (bound %.3g)\n",
              what.c_str(), loss_d, loss_bound, grad_d, grad_bound, param_d, param_bound);
  EXPECT_LT(loss_d, loss_bound) << what;
  EXPECT_LT(grad_d, grad_bound) << what;
  EXPECT_LT(param_d, param_bound) << what;
  for (double l : run.loss) EXPECT_TRUE(std::isfinite(l)) << what;
}

// Five steps of `c` under each policy on the backends `make` gives, each in fp32 and
// bf16, against the CPU's in-memory fp32 run and the bf16 reference cpu16 (the CPU's
// bf16 arithmetic as the backend computes it).
template <typename MakeBackend>
void check_model(const ModelConfig& c, const std::string& name, const std::filesystem::path& dir,
                 const KernelTable& table, MakeBackend make, const Trajectory& cpu16,
                 const std::vector<std::string>& policies = {"keep-all", "megatrain", "milp"}) {
  RunOptions bf16;
  bf16.precision = Precision::BF16;
  const Trajectory cpu32 = run_reference(c);
  PlanRequest req = request(c);
  req.scratch = executor_scratch(c, kBatch, kSeq, table);  // the executor refuses a plan counting less
  for (const std::string& policy : policies) {
    const Plan p = make_plan(req, policy);
    ASSERT_TRUE(p.feasible) << policy << ": " << p.infeasible_reason;
    expect_within_bf16_distance(run_streaming(c, p, dir, make()), cpu32, cpu32, cpu16, name + " fp32 " + policy);
    expect_within_bf16_distance(run_streaming(c, p, dir, make(), bf16), cpu16, cpu32, cpu16, name + " bf16 " + policy);
  }
}

// The CPU's table with the CUDA table's bf16 attention: the tensor-core kernels under the
// warp emulator (the fp32 runs keep the CPU's attention, as the CUDA table keeps its fp32
// kernel).
KernelTable emulated_tensor_core_attention_table() {
  KernelTable t = cpu_kernel_table();
  t.attention_forward = [](float* o, float* lse, const float* q, const float* k, const float* v, int64_t B, int64_t S,
                           int64_t Hq, int64_t Hkv, int64_t D, float scale, const int32_t* doc_start, int64_t window,
                           Precision p) {
    if (p == Precision::BF16)
      test::emulated_attention_forward_bf16(o, lse, q, k, v, B, S, Hq, Hkv, D, scale, doc_start, window);
    else
      cpu_kernel_table().attention_forward(o, lse, q, k, v, B, S, Hq, Hkv, D, scale, doc_start, window, p);
  };
  t.attention_backward = [](float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                            const float* v, const float* o, const float* lse, int64_t B, int64_t S, int64_t Hq,
                            int64_t Hkv, int64_t D, float scale, const int32_t* doc_start, int64_t window,
                            Precision p) {
    if (p == Precision::BF16)
      test::emulated_attention_backward_bf16(dq, dk, dv, dout, q, k, v, o, lse, B, S, Hq, Hkv, D, scale, doc_start,
                                             window);
    else
      cpu_kernel_table().attention_backward(dq, dk, dv, dout, q, k, v, o, lse, B, S, Hq, Hkv, D, scale, doc_start,
                                            window, p);
  };
  return t;
}

// The CPU's bf16 training as the cuda backend computes it (five steps under the megatrain
// rule; the CPU's streamed runs are bitwise alike under every plan).
Trajectory tensor_core_bf16_reference(const ModelConfig& c, const std::filesystem::path& dir) {
  const KernelTable table = emulated_tensor_core_attention_table();
  PlanRequest req = request(c);
  req.scratch = executor_scratch(c, kBatch, kSeq, table);
  const Plan p = make_plan(req, "megatrain");
  EXPECT_TRUE(p.feasible) << p.infeasible_reason;
  RunOptions bf16;
  bf16.precision = Precision::BF16;
  return run_streaming(c, p, dir, std::make_unique<test::TableBackend>(table), bf16);
}

ModelConfig hybrid_config() {
  return test::qwen3_5_tiny_config({LayerKind::LinearAttention, LayerKind::Attention, LayerKind::LinearAttention,
                                    LayerKind::Attention});
}

class StreamingCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = test::error_of([] { make_cuda_backend(); });
    if (!why.empty()) GTEST_SKIP() << "compiled, not run: " << why;
    dir_ = std::filesystem::temp_directory_path() / ("lt-streaming-cuda-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
};

TEST_F(StreamingCuda, DenseTrainingMatchesTheCpuWithinTheBf16Distance) {
  const ModelConfig c = test::streaming_tiny_config(4);
  check_model(c, "cuda dense", dir_, cuda_backend_kernel_table(), [] { return make_cuda_backend(); },
              tensor_core_bf16_reference(c, dir_));
}

TEST_F(StreamingCuda, HybridTrainingMatchesTheCpuWithinTheBf16Distance) {
  const ModelConfig c = hybrid_config();
  check_model(c, "cuda qwen3.5 hybrid", dir_, cuda_backend_kernel_table(), [] { return make_cuda_backend(); },
              tensor_core_bf16_reference(c, dir_));
}

// The same check where it runs here: the emu backend (bitwise the CPU's, so at distance
// 0) with a yardstick that is not 0 on either model, so the GPU's check above compares
// against a real distance.
TEST(StreamingCudaYardstick, EmuIsWithinItAndItIsNotZero) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("lt-streaming-yardstick-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto emu = [] { return make_emu_backend(); };
  RunOptions bf16;
  bf16.precision = Precision::BF16;
  const ModelConfig dense = test::streaming_tiny_config(4), hybrid = hybrid_config();
  check_model(dense, "emu dense", dir, cpu_kernel_table(), emu, run_reference(dense, bf16), {"megatrain"});
  check_model(hybrid, "emu qwen3.5 hybrid", dir, cpu_kernel_table(), emu, run_reference(hybrid, bf16), {"megatrain"});
  std::filesystem::remove_all(dir);
}

// The cuda runs' bf16 reference (tensor_core_bf16_reference) where it runs here: it is
// not the CPU's bf16 run (the emulated attention is in use), and its yardstick is a real
// distance. Printed beside it, what the CPU's bf16 run would have been as the reference:
// the tensor cores' bf16 attention alone moves the hybrid model's losses by more than the
// CPU's whole bf16-vs-fp32 distance (0.36 against 0.21 when this was written), so a cuda
// bf16 run would have failed against it with every kernel right.
TEST(StreamingCudaYardstick, TheTensorCoreReferenceIsARealDistance) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("lt-streaming-tc-reference-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  RunOptions bf16;
  bf16.precision = Precision::BF16;
  const std::vector<std::pair<const char*, ModelConfig>> models = {{"dense", test::streaming_tiny_config(4)},
                                                                    {"hybrid", hybrid_config()}};
  for (const auto& [name, c] : models) {
    const Trajectory tc16 = tensor_core_bf16_reference(c, dir), cpu16 = run_reference(c, bf16),
                     cpu32 = run_reference(c);
    const double tc_vs_cpu16 = loss_distance(tc16, cpu16), yardstick = loss_distance(tc16, cpu32);
    std::printf("%s: losses of the tensor-core bf16 reference vs the CPU's bf16 run %.3g, vs its fp32 run %.3g "
                "(the yardstick); the CPU's bf16 vs fp32 %.3g\n",
                name, tc_vs_cpu16, yardstick, loss_distance(cpu16, cpu32));
    EXPECT_GT(tc_vs_cpu16, 0) << name << ": the emulated attention did not run";
    EXPECT_GT(yardstick, 0) << name;
    EXPECT_GT(l2_distance(tc16.grads[0], cpu32.grads[0]), 0) << name;
    EXPECT_GT(l2_distance(tc16.final_params, cpu32.final_params), 0) << name;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace lt
