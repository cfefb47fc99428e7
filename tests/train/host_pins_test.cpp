// The host memory the links copy from and to outside the executor's buffers (parameters,
// their bf16 copy, gradients) is page-locked through the backend once for a run, never per
// step, and unlocked when the run goes; where the plan pages parts of it (page-locked pages
// cannot be given back) it stays pageable and the run says so. A backend that records its
// pins stands in for the GPU's (cudaHostRegister), whose pins run in scripts/gpu_check.sh.
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "exec/host_pins.h"
#include "layers/compute_copy.h"
#include "train/streamed_training.h"
#include "../exec/streaming_test_util.h"
#include "out_of_core_plan.h"
#include "test_util.h"

namespace lt {
namespace {

// What a PinningBackend's pins did: every range asked for, how many are held now, and
// which call fails (-1: none).
struct PinLog {
  std::vector<std::pair<void*, size_t>> ranges;
  int held = 0;
  int fail_at = -1;
};

// cpu's kernels on a separate compute tier in host RAM (copies are memcpy, as on emu),
// with pins that note themselves in a log.
class PinningBackend final : public Backend {
 public:
  explicit PinningBackend(std::shared_ptr<PinLog> log) : log_(std::move(log)) {}
  const char* name() const override { return "pinning test backend"; }
  bool host_is_compute() const override { return false; }
  // The executor issues empty copies too, with null pointers (a window with no rows to move).
  void copy_to_compute(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void synchronize() override {}
  std::unique_ptr<HostPin> pin_host(void* p, size_t bytes) override {
    if (static_cast<int>(log_->ranges.size()) == log_->fail_at)
      throw Error("could not page-lock " + std::to_string(bytes) + " bytes", "test backend", "none");
    log_->ranges.emplace_back(p, bytes);
    return std::make_unique<Pin>(log_);
  }

 private:
  struct Pin final : HostPin {
    explicit Pin(std::shared_ptr<PinLog> log) : log(std::move(log)) { ++this->log->held; }
    ~Pin() override { --log->held; }
    std::shared_ptr<PinLog> log;
  };
  std::shared_ptr<PinLog> log_;
};

TEST(HostPins, PinTheParametersTheirCopyAndTheGradientsUntilTheyGo) {
  const ModelConfig c = test::streaming_tiny_config();
  ModelParameters params(c), grads(c);
  const size_t n = static_cast<size_t>(params.numel());
  for (Precision precision : {Precision::BF16, Precision::F32}) {
    auto log = std::make_shared<PinLog>();
    PinningBackend backend(log);
    ComputeCopy copy(precision);
    {
      const HostPins pins = pin_step_memory(backend, params, grads, copy.data(params));
      std::vector<std::pair<void*, size_t>> expected = {{params.data(), 4 * n}, {grads.data(), 4 * n}};
      if (precision == Precision::BF16) expected.emplace_back(copy.data(params), 2 * n);
      EXPECT_EQ(log->ranges, expected);
      EXPECT_EQ(log->held, static_cast<int>(expected.size()));
      EXPECT_EQ(pins.bytes, precision == Precision::BF16 ? 10 * n : 8 * n);
      EXPECT_TRUE(pins.not_pinned.empty()) << pins.not_pinned;
    }
    EXPECT_EQ(log->held, 0) << "pins outlived their HostPins";
  }
}

TEST(HostPins, AFailedPinUnpinsTheOthersAndSaysWhy) {
  const ModelConfig c = test::streaming_tiny_config();
  ModelParameters params(c), grads(c);
  ComputeCopy copy(Precision::BF16);
  auto log = std::make_shared<PinLog>();
  log->fail_at = 2;  // the copy's
  PinningBackend backend(log);
  const HostPins pins = pin_step_memory(backend, params, grads, copy.data(params));
  EXPECT_EQ(log->ranges.size(), 2u);
  EXPECT_EQ(log->held, 0);
  EXPECT_TRUE(pins.pins.empty());
  EXPECT_EQ(pins.bytes, 0u);
  EXPECT_NE(pins.not_pinned.find("could not page-lock"), std::string::npos) << pins.not_pinned;
}

TEST(HostPins, BackendsWhoseCopiesAreMemcpyPinNothing) {
  const ModelConfig c = test::streaming_tiny_config();
  ModelParameters params(c), grads(c);
  ComputeCopy copy(Precision::BF16);
  for (const char* name : {"cpu", "emu"}) {
    const std::unique_ptr<Backend> backend = make_backend(name);
    const HostPins pins = pin_step_memory(*backend, params, grads, copy.data(params));
    EXPECT_EQ(pins.bytes, 0u) << name;
    EXPECT_TRUE(pins.pins.empty()) << name;
    EXPECT_TRUE(pins.not_pinned.empty()) << name;
  }
}

// The data-parallel and streamed trainer tests' scratch model's shape, six layers: its plans
// at 2 x 64 tokens stream boundaries through host memory and NVMe.
ModelConfig six_layers() {
  ModelConfig c = test::streaming_tiny_config(6);
  c.hidden_size = 32;
  c.head_dim = 8;
  c.intermediate_size = 64;
  return c;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

// Trains three bf16 steps of `plan` on a PinningBackend; returns the log and the run's
// description, and checks every pin is gone with the run.
std::pair<std::shared_ptr<PinLog>, std::string> train_three_steps(const Plan& plan, int64_t* held_during) {
  test::TempDir dir("host-pins");
  TrainConfig cfg;
  cfg.batch = plan.batch;
  cfg.seq_len = plan.seq;
  cfg.steps = 3;
  cfg.warmup_steps = 0;
  cfg.precision = "bf16";
  cfg.offload_dir = dir.str();
  cfg.adaptive_plan = "off";
  ModelParameters params(plan.model), grads(plan.model);
  test::init_parameters(params, 5);
  Updater updater(cfg, params, plan.nvme_state_layers);
  auto log = std::make_shared<PinLog>();
  std::string description;
  {
    StreamedTraining::Options o;
    o.backend = std::make_unique<PinningBackend>(log);
    StreamedTraining st(cfg, plan, params, grads, updater, std::move(o));
    std::vector<int32_t> ids(plan.batch * plan.seq);
    for (int step = 1; step <= 3; ++step) {
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7 + step) % plan.model.vocab_size);
      st.step(ids.data(), ids.data(), plan.batch * (plan.seq - 1), step);
    }
    st.flush();
    *held_during = log->held;
    description = joined(st.describe());
  }
  EXPECT_EQ(log->held, 0) << "the run left memory pinned";
  return {log, description};
}

TEST(HostPins, TheStreamedTrainerPinsOnceForTheRun) {
  const Plan plan = test::out_of_core_plan(six_layers(), 2, 64, /*page_states=*/false);
  ASSERT_TRUE(plan.feasible) << plan.infeasible_reason;
  int64_t held = 0;
  const auto [log, description] = train_three_steps(plan, &held);
  EXPECT_EQ(log->ranges.size(), 3u) << "pinned other than once, for the parameters, copy and gradients";
  EXPECT_EQ(held, 3);
  EXPECT_NE(description.find("page-locked once"), std::string::npos) << description;
}

TEST(HostPins, NotWhereThePlanPagesPartsOfThem) {
  const Plan plan = test::out_of_core_plan(six_layers(), 2, 64, true, 1, true, /*page_master=*/true);
  ASSERT_TRUE(plan.feasible) << plan.infeasible_reason;
  ASSERT_FALSE(plan.nvme_master_layers.empty()) << "the plan pages no masters";
  int64_t held = 0;
  const auto [log, description] = train_three_steps(plan, &held);
  EXPECT_TRUE(log->ranges.empty());
  EXPECT_NE(description.find("pageable, copies slower (the plan pages parts of them"), std::string::npos)
      << description;
}

}  // namespace
}  // namespace lt
