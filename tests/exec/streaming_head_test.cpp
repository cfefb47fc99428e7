// The streamed head in the executor (exec/streaming_head.cpp): a plan that moves the
// lm_head through the compute tier in vocabulary chunks trains bitwise like the in-memory
// step (ModelStep: the cross-entropy walks the same chunks in the same order whatever the
// head's layout), on the cpu and emu backends, fp32 and bf16, with tied embeddings, under
// plans that recompute and offload, and under a MILP plan whose compute cap is below any
// whole-head plan's need; gradient accumulation gives the whole head's bits; the compute
// tier holds two chunk slots for the weights and two for the gradients, and stays within
// the plan in every window; a chunk that is not made of whole cross-entropy sub-chunks is
// an lt::Error. How far the sub-chunked summation moves results from the old partition
// (within the fp32 bounds derived there) is tests/kernels/cross_entropy_test.cpp's.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "exec/backend.h"
#include "exec/backend_cuda.h"
#include "exec/streaming_executor.h"
#include "kernels/cpu/cross_entropy.h"
#include "layers/compute_copy.h"
#include "plan/default_schedule.h"
#include "plan/plan_builder.h"
#include "plan/plan_evaluate.h"
#include "plan/plan_validate.h"
#include "plan/planner.h"
#include "sim/simulator.h"
#include "streaming_test_util.h"
#include "streaming_trajectory.h"
#include "table_backend.h"
#include "test_util.h"

namespace lt {
namespace {

using namespace streaming_test;

// The streaming tests' tiny llama with a vocabulary of 16384 + 16384 + 904 rows: three
// chunks of the planner's quantum, the last one ragged.
ModelConfig big_vocab_config(int layers = 4) {
  ModelConfig c = test::streaming_tiny_config(layers);
  c.vocab_size = 2 * kHeadChunkQuantum + 904;
  return c;
}

class StreamingHead : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("lt-streaming-head-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // The executor's options for these steps: the NVMe tier in dir_, buffered.
  StreamingOptions buffered_options() const {
    StreamingOptions so;
    so.offload_dir = dir_;
    so.direct_io = false;
    return so;
  }
  std::filesystem::path dir_;
};

TEST_F(StreamingHead, ChunkedHeadTrainsBitwiseLikeTheInMemoryStep) {
  const ModelConfig c = big_vocab_config();
  const Trajectory ref = run_reference(c);
  EXPECT_NE(ref.loss.front(), ref.loss.back());
  for (bool mixed : {false, true}) {
    const Plan p = decided_plan(c, kHeadChunkQuantum, mixed);
    ASSERT_EQ(p.head_chunks(), 3);
    const SimResult sim = simulate_plan(p);
    EXPECT_TRUE(sim.violations.empty()) << sim.violations.front();
    const std::string what = mixed ? "recompute and offload" : "all on the compute tier";
    expect_bitwise_equal(run_streaming(c, p, dir_), ref, "cpu, " + what);
    expect_bitwise_equal(run_streaming(c, p, dir_, make_emu_backend(2, 2)), ref, "emu, " + what);
  }
}

TEST_F(StreamingHead, Bf16AndTiedEmbeddingsToo) {
  const ModelConfig c = big_vocab_config();
  const RunOptions bf16{.eight_bit = true, .precision = Precision::BF16};
  const Trajectory ref16 = run_reference(c, bf16);
  const Plan p16 = decided_plan(c, kHeadChunkQuantum, true, /*weight_bytes=*/2);
  expect_bitwise_equal(run_streaming(c, p16, dir_, make_cpu_backend(), bf16), ref16, "bf16 cpu");
  expect_bitwise_equal(run_streaming(c, p16, dir_, make_emu_backend(2, 2), bf16), ref16, "bf16 emu");
  ModelConfig tied = big_vocab_config();
  tied.tie_word_embeddings = true;
  const Trajectory ref = run_reference(tied);
  const Plan pt = decided_plan(tied, kHeadChunkQuantum, true);
  expect_bitwise_equal(run_streaming(tied, pt, dir_), ref, "tied cpu");
  expect_bitwise_equal(run_streaming(tied, pt, dir_, make_emu_backend()), ref, "tied emu");
}

// A cap below what a whole head needs in HEAD: only the MILP's streamed head fits, and
// the step it plans trains with ModelStep's bits on the emu backend, every window within
// the plan's compute-tier bytes (activations planned at the executor's fp32).
TEST_F(StreamingHead, MilpPlanUnderACapBelowTheWholeHeadTrainsWithinItsMemory) {
  const ModelConfig c = big_vocab_config(6);
  PlanRequest req = request(c);
  req.hardware.act_bytes = 4;
  const CostModel cm = build_cost_model(req);
  const Plan loose = make_plan(req, "keep-all");
  const HeadFootprint whole = cm.head_footprint(0);
  req.gpu_cap_bytes = loose.fixed_gpu_bytes + whole.weight_buffer_bytes + whole.grad_buffer_bytes +
                      cm.boundary_bytes + cm.workspace_head - 0.5 * cm.boundary_bytes;
  EXPECT_FALSE(make_plan(req, "recompute-all").feasible) << "a whole head should not fit";
  const Plan p = make_plan(req, "milp");
  ASSERT_TRUE(p.feasible) << p.infeasible_reason;
  ASSERT_GT(p.head_chunk_rows, 0);
  ModelParameters params(c), grads(c);
  test::init_parameters(params, 7);
  std::vector<int32_t> ids, labels;
  test::make_batch(ids, labels, kBatch * kSeq, c.vocab_size, 0);
  auto emu = make_emu_backend(2, 2);
  const StreamingOptions so = buffered_options();
  StreamingExecutor ex(p, *emu, so);
  const StreamingStepResult r = ex.step(params, grads, ids.data(), labels.data());
  EXPECT_LE(ex.measured_peak_bytes(), ex.planned_peak_bytes());
  ASSERT_EQ(r.compute_bytes.size(), p.windows.size());
  double live = p.fixed_gpu_bytes;
  for (size_t w = 0; w < p.windows.size(); ++w) {
    for (const MemOp& a : p.windows[w].alloc) live += a.bytes;
    EXPECT_LE(r.compute_bytes[w].second, live + p.windows[w].workspace_bytes)
        << "window " << p.windows[w].name << ": the executor holds more than the plan";
    for (const MemOp& f : p.windows[w].free) live -= f.bytes;
  }
  expect_bitwise_equal(run_streaming(c, p, dir_, make_emu_backend()), run_reference(c), "emu milp, streamed head");
}

// The compute tier holds two weight and two gradient slots of one chunk each, where the
// whole head's plan holds the lm_head twice over; the peak drops by the difference.
TEST_F(StreamingHead, ComputeTierHoldsTwoChunkSlotsEach) {
  const ModelConfig c = big_vocab_config();
  auto emu = make_emu_backend();
  const Plan streamed = decided_plan(c, kHeadChunkQuantum, false), whole = decided_plan(c, 0, false);
  StreamingExecutor es(streamed, *emu), ew(whole, *emu);
  const size_t C = static_cast<size_t>(c.hidden_size), V = static_cast<size_t>(c.vocab_size);
  const size_t chunk = static_cast<size_t>(kHeadChunkQuantum) * C * sizeof(float);
  int slots = 0;
  for (const ArenaRequest& a : es.schedule().arena) {
    EXPECT_NE(a.name, "w.lm_head");
    EXPECT_NE(a.name, "g.lm_head");
    if (a.name.rfind("w.lm_head.", 0) == 0 || a.name.rfind("g.lm_head.", 0) == 0) {
      EXPECT_EQ(a.bytes, chunk) << a.name;
      ++slots;
    }
  }
  EXPECT_EQ(slots, 4);
  // The head's window is the peak of these plans: its slots, and the cross-entropy's
  // scratch (ws.HEAD), which keeps a token chunk's logits for the whole vocabulary in the
  // whole call and one sub-chunk's in the streamed one.
  const int64_t T = streamed.batch * streamed.seq;
  const size_t ce_whole = head_cross_entropy_workspace_bytes(T, c.hidden_size, c.vocab_size, Precision::F32, false);
  const size_t ce_streamed = head_cross_entropy_workspace_bytes(T, c.hidden_size, c.vocab_size, Precision::F32, true);
  EXPECT_EQ(ew.planned_peak_bytes() - es.planned_peak_bytes(),
            2 * V * C * sizeof(float) - 4 * chunk + ce_whole - ce_streamed);
}

// Gradient accumulation (zero_grads = false adds into the host's sums): the streamed head
// adds chunk by chunk what the whole head adds at once, the same bits.
TEST_F(StreamingHead, AccumulatedGradientsEqualTheWholeHeads) {
  const ModelConfig c = big_vocab_config();
  auto run = [&](const Plan& p) {
    ModelParameters params(c), grads(c);
    test::init_parameters(params, 7);
    auto emu = make_emu_backend(3, 3);
    const StreamingOptions so = buffered_options();
    StreamingExecutor ex(p, *emu, so);
    std::vector<int32_t> ids, labels;
    std::vector<double> sq;
    for (int micro = 0; micro < 2; ++micro) {
      test::make_batch(ids, labels, kBatch * kSeq, c.vocab_size, micro);
      StepOptions o;
      o.zero_grads = micro == 0;
      sq.push_back(ex.step(params, grads, ids.data(), labels.data(), o).grad_sq_sum);
    }
    std::vector<float> g(grads.data(), grads.data() + grads.numel());
    return std::make_pair(g, sq);
  };
  const auto whole = run(decided_plan(c, 0, true)), streamed = run(decided_plan(c, kHeadChunkQuantum, true));
  EXPECT_TRUE(whole.first == streamed.first) << "accumulated gradients differ";
  EXPECT_EQ(whole.second, streamed.second);
}

// StepOptions::slot_sums (issue 29 part C, the ranks' sums on the compute tier) reach
// every layer's gradient slot and the head's (the final norm, an untied lm_head whole or
// chunk by chunk) before they drain, and nothing else: with sums that double a slot, the
// host's layer and head gradients are exactly twice those of a step without them and the
// embedding's (a tied lm_head's included) the same. Each slot once, and each sum started is
// waited for: the doubled elements are exactly the layers' and the head's, each slot
// started with its own target (as many elements for each as the target has). On a backend
// whose compute tier is host memory (cpu: no slots) they are an lt::Error.
// Two ranks of the same rows: a slot's sum is twice it, made when its drain comes (so a
// drain before its sum would copy the undoubled slot).
struct Doubling final : SlotSums {
  std::vector<std::pair<float*, int64_t>> started_slots;
  std::map<std::string, int64_t> elements;  // started, by target name
  int64_t doubled = 0, started = 0, drained = 0;
  int64_t start(const UpdateTarget& target, float* slot, int64_t n) override {
    started_slots.push_back({slot, n});
    elements[target.name()] += n;
    return ++started;
  }
  void before_drain(int64_t ticket) override {
    ASSERT_GE(ticket, 1);
    auto [slot, n] = started_slots.at(static_cast<size_t>(ticket - 1));
    for (int64_t i = 0; i < n; ++i) slot[i] *= 2;
    doubled += n;
    ++drained;
  }
};

TEST_F(StreamingHead, TheSlotSumsReachTheLayersAndTheHeadBeforeTheyDrain) {
  for (bool tied : {false, true}) {
    ModelConfig c = big_vocab_config();
    c.tie_word_embeddings = tied;
    ModelParameters params(c);
    test::init_parameters(params, 11);
    std::vector<int32_t> ids, labels;
    test::make_batch(ids, labels, kBatch * kSeq, c.vocab_size, 0);
    for (int64_t rows : {int64_t{0}, kHeadChunkQuantum}) {
      const Plan p = decided_plan(c, rows, true);
      const std::string what = std::string(tied ? "tied" : "untied") + (rows ? ", chunked head" : ", whole head");
      Doubling twice;
      auto step = [&](SlotSums* sums) {
        ModelParameters grads(c);
        auto emu = make_emu_backend(2, 2);
        const StreamingOptions so = buffered_options();
        StreamingExecutor ex(p, *emu, so);
        StepOptions o;
        o.slot_sums = sums;
        ex.step(params, grads, ids.data(), labels.data(), o);
        return std::vector<float>(grads.data(), grads.data() + grads.numel());
      };
      const std::vector<float> own = step(nullptr), summed = step(&twice);
      int64_t expected = 0;
      std::vector<UpdateTarget> targets = {{UpdateTarget::Kind::Embed, -1}, {UpdateTarget::Kind::Head, -1}};
      for (int j = 0; j < c.num_layers; ++j) targets.push_back({UpdateTarget::Kind::Layer, j});
      for (const UpdateTarget& t : targets) {
        const bool in_slots = t.kind != UpdateTarget::Kind::Embed;
        int64_t target_elements = 0;
        for (auto [o, n] : target_ranges(params, t)) {
          if (in_slots) expected += n;
          if (in_slots) target_elements += n;
          int64_t wrong = 0;
          for (int64_t i = o; i < o + n; ++i) wrong += summed[i] != (in_slots ? 2 * own[i] : own[i]);
          EXPECT_EQ(wrong, 0) << what << ": target kind " << static_cast<int>(t.kind) << " layer " << t.layer;
        }
        const auto started_for = twice.elements.find(t.name());
        EXPECT_EQ(started_for == twice.elements.end() ? 0 : started_for->second, target_elements)
            << what << ": " << t.name();
      }
      EXPECT_EQ(twice.doubled, expected) << what;
      EXPECT_EQ(twice.started, twice.drained) << what;
    }
  }
  const ModelConfig c = big_vocab_config();
  ModelParameters params(c), grads(c);
  test::init_parameters(params, 11);
  std::vector<int32_t> ids, labels;
  test::make_batch(ids, labels, kBatch * kSeq, c.vocab_size, 0);
  auto cpu = make_cpu_backend();
  StreamingOptions so;
  so.offload_dir = dir_;
  StreamingExecutor ex(decided_plan(c, 0, true), *cpu, so);
  Doubling nothing;
  StepOptions o;
  o.slot_sums = &nothing;
  EXPECT_THROW(ex.step(params, grads, ids.data(), labels.data(), o), Error);
}

// A failed step orders every layer's slot sum it started before the arena is reused, each
// once (a real sum's ticket is spent once ordered, and ordering it again throws): here
// ordering the second layer's sum fails, the step fails, and abandoning it orders the
// layers' sums not yet ordered, not the first again.
struct FailingOnce final : SlotSums {
  std::map<int64_t, int> ordered;  // the layers' sums, by ticket: how many times
  int64_t started = 0, layer_calls = 0;
  int64_t start(const UpdateTarget& target, float*, int64_t) override {
    if (target.kind == UpdateTarget::Kind::Layer) ordered[started + 1] = 0;
    return ++started;
  }
  void before_drain(int64_t ticket) override {
    if (!ordered.count(ticket)) return;  // the head's
    if (++layer_calls == 2) throw Error("a slot's sum failed");
    if (ordered.at(ticket)++ > 0) throw Error("sum ticket " + std::to_string(ticket) + " ordered again");
  }
};

TEST_F(StreamingHead, AFailedStepOrdersEverySlotSumItStartedOnce) {
  const ModelConfig c = big_vocab_config();
  ModelParameters params(c), grads(c);
  test::init_parameters(params, 11);
  std::vector<int32_t> ids, labels;
  test::make_batch(ids, labels, kBatch * kSeq, c.vocab_size, 0);
  auto emu = make_emu_backend(2, 2);
  const StreamingOptions so = buffered_options();
  // Layers 3 and 2 drain in one window (the plan's drains are one a window; a later one
  // may hold several), so that the first ordering of a window has been done when the
  // second fails.
  Plan p = decided_plan(c, 0, true);
  Transfer* g3 = nullptr;
  Window* with_g2 = nullptr;
  for (Window& w : p.windows)
    for (Transfer& t : w.transfers) {
      if (t.tensor == "g.3" && t.link == Link::D2H) g3 = &t;
      if (t.tensor == "g.2" && t.link == Link::D2H) with_g2 = &w;
    }
  ASSERT_TRUE(g3 && with_g2);
  const Transfer moved = *g3;
  for (Window& w : p.windows)
    std::erase_if(w.transfers, [](const Transfer& t) { return t.tensor == "g.3" && t.link == Link::D2H; });
  with_g2->transfers.insert(with_g2->transfers.begin(), moved);
  StreamingExecutor ex(p, *emu, so);
  FailingOnce sums;
  StepOptions o;
  o.slot_sums = &sums;
  const std::string m = test::error_of([&] { ex.step(params, grads, ids.data(), labels.data(), o); });
  EXPECT_NE(m.find("a slot's sum failed"), std::string::npos) << m;
  ASSERT_GE(sums.ordered.size(), 2u);
  for (const auto& [ticket, times] : sums.ordered) EXPECT_EQ(times, 1) << "sum ticket " << ticket;
}

TEST_F(StreamingHead, ChunksOfPartialSubChunksAreAnError) {
  const ModelConfig c = big_vocab_config();
  Plan p = decided_plan(c, kHeadChunkQuantum, false);
  PlanRequest req = request(c);
  const CostModel cm = build_cost_model(req);
  Decisions d = all_gpu_decisions(static_cast<int>(c.num_layers), "odd");
  d.head_chunk_rows = 1000;  // not a multiple of the cross-entropy's 16384-row sub-chunk
  p = build_plan(req, cm, d);
  auto emu = make_emu_backend();
  try {
    StreamingExecutor ex(p, *emu);
    FAIL() << "expected an lt::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a multiple of the cross-entropy's vocabulary sub-chunk"),
              std::string::npos)
        << e.what();
  }
}

// A kernel table's head_options reach its cross-entropy: the executor's scratch is sized
// with them and the whole and streamed heads are called with them (a table that sized
// one budget and ran another would overrun its workspace). The table here is the CPU's
// with a 1 MiB logit budget, its head entries noting the options they get.
struct NotedHead {
  static inline std::vector<int64_t> budgets;  // max_logit_bytes of each call
  static inline const KernelTable* cpu = nullptr;
  static CrossEntropyOptions options() {
    CrossEntropyOptions o;
    o.max_logit_bytes = int64_t{1} << 20;
    return o;
  }
  static KernelTable table() {
    cpu = &cpu_kernel_table();
    KernelTable k = *cpu;
    k.head_options = options();
    k.head_cross_entropy = [](float* dx, float* dw, const float* x, const float* w, const bf16* w_bf16,
                              const int32_t* targets, int64_t T, int64_t C, int64_t V, float grad_scale, Precision p,
                              const CrossEntropyOptions& opt, void* workspace) {
      budgets.push_back(opt.max_logit_bytes);
      return cpu->head_cross_entropy(dx, dw, x, w, w_bf16, targets, T, C, V, grad_scale, p, opt, workspace);
    };
    k.head_cross_entropy_stream = [](const float* x, const int32_t* targets, int64_t T, int64_t C, int64_t V,
                                     float grad_scale, Precision p, const CrossEntropyOptions& opt, void* workspace) {
      budgets.push_back(opt.max_logit_bytes);
      return cpu->head_cross_entropy_stream(x, targets, T, C, V, grad_scale, p, opt, workspace);
    };
    k.head_cross_entropy_vocab_chunk = [](int64_t T, int64_t V, Precision p) {
      return cross_entropy_chunks(T, V, options(), p).vocab_chunk;
    };
    return k;
  }
};

TEST_F(StreamingHead, TheTablesHeadOptionsReachTheCrossEntropy) {
  const ModelConfig c = big_vocab_config();
  const int64_t T = kBatch * kSeq, C = c.hidden_size, V = c.vocab_size;
  test::TableBackend backend(NotedHead::table());
  const KernelTable& k = backend.kernels();
  const int64_t budget = NotedHead::options().max_logit_bytes;
  // The CPU's own table keeps the default the bits of every CPU test rest on.
  EXPECT_EQ(cpu_kernel_table().head_options.max_logit_bytes, CrossEntropyOptions{}.max_logit_bytes);
  for (bool streamed : {false, true}) {
    SCOPED_TRACE(streamed ? "streamed head" : "whole head");
    const size_t want = head_cross_entropy_workspace_bytes(T, C, V, Precision::F32, streamed, NotedHead::options());
    EXPECT_EQ(step_scratch(c, kBatch, kSeq, k, Precision::F32, streamed).head, want);
    EXPECT_LT(want, step_scratch(c, kBatch, kSeq, cpu_kernel_table(), Precision::F32, streamed).head);
    ModelParameters params(c), grads(c);
    test::init_parameters(params, 7);
    const StreamingOptions so = buffered_options();
    StreamingExecutor ex(decided_plan(c, streamed ? kHeadChunkQuantum : 0, false), backend, so);
    std::vector<int32_t> ids, labels;
    test::make_batch(ids, labels, T, V, 0);
    NotedHead::budgets.clear();
    const StreamingStepResult r = ex.step(params, grads, ids.data(), labels.data());
    EXPECT_TRUE(std::isfinite(r.loss));
    EXPECT_EQ(NotedHead::budgets, std::vector<int64_t>{budget});
  }
}

// The CUDA table's budget (its sizes need no device): at 32 x 1024 tokens and a
// Qwen2.5-sized vocabulary, bf16, its sub-chunks are wide enough for the tensor cores,
// where the CPU's default budget would give 128 rows.
TEST(CudaHeadOptions, SubChunksAreWideAtTrainingSizes) {
  const KernelTable* cuda = nullptr;
  if (const std::string why = test::error_of([&] { cuda = &cuda_backend_kernel_table(); }); !why.empty())
    GTEST_SKIP() << why;
  const int64_t T = 32 * 1024, V = 152064;
  EXPECT_GE(cuda->head_cross_entropy_vocab_chunk(T, V, Precision::BF16), 2048);
  EXPECT_GT(cuda->head_options.max_logit_bytes, CrossEntropyOptions{}.max_logit_bytes);
}

}  // namespace
}  // namespace lt
