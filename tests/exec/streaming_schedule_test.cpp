// The schedule's typed compute-tier ids (plan/stream_schedule.h): every arena request
// has exactly one (tensor, index) id and every id its one request, spelled as the request
// is named; the ids present are exactly what the plan keeps where (boundaries stored
// whole, offloaded, recomputed; internals kept; weight and gradient slots only where the
// compute tier is separate, the head's chunk slots only for a streamed head); absent ids
// look up as -1. And the per-layer saved-tensor layouts the executor binds by: disjoint
// fields that tile the layer's saved tensors.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "exec/backend.h"
#include "exec/streaming_executor.h"
#include "layers/decoder_block.h"
#include "plan/planner.h"
#include "streaming_test_util.h"
#include "streaming_trajectory.h"

namespace lt {
namespace {

using namespace streaming_test;
using A = ArenaTensor;

// The request name each id stands for, spelled out here independently of the schedule.
std::string expected_name(const ArenaKey& k, bool streamed_head, const Plan& plan) {
  const std::string i = std::to_string(k.index);
  switch (k.tensor) {
    case A::Boundary: return "x." + i;
    case A::BoundaryGpuPart: return "a." + i + ".gpu";
    case A::Refetched: return "r." + i;
    // Indexed by placement, not by boundary: the name is r.<b>.<k>, the boundary's k-th
    // later fetch, which the caller checks against the request before it.
    case A::RefetchedMore: return "";
    case A::Recomputed: return "rc." + i;
    case A::Internals: return "int." + i;
    case A::HeadNormOut: return "head.norm_out";
    case A::HeadRstd: return "head.rstd";
    case A::HeadDHidden: return "head.d_hidden";
    case A::Weights: return "w." + i;
    case A::RecomputeWeights: return "wr." + i;
    case A::BackwardWeights: return "wb." + i;
    case A::Gradients: return "g." + i;
    case A::NormWeights: return "w.norm";
    case A::NormGradients: return "g.norm";
    case A::LmHead: return streamed_head ? "w.lm_head." + i : "w.lm_head";
    case A::LmHeadGradients: return streamed_head ? "g.lm_head." + i : "g.lm_head";
    case A::Dx: return "dx." + i;
    case A::Workspace: return "ws." + plan.windows[static_cast<size_t>(k.index)].name;
  }
  return "?";
}

struct Case {
  std::string what;
  Plan plan;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  const ModelConfig c = test::streaming_tiny_config(6);
  const PlanRequest req = request(c);
  for (const char* policy : {"keep-all", "recompute-all", "megatrain", "megatrain-code", "milp"})
    out.push_back({policy, make_plan(req, policy)});
  out.push_back({"offloading milp", offloading_milp_plan(c)});
  // A head streamed in chunks of the planner's quantum (two whole and a ragged third), with
  // a recomputed, an offloaded and a kept-internals layer.
  ModelConfig big_vocab = test::streaming_tiny_config(4);
  big_vocab.vocab_size = 2 * kHeadChunkQuantum + 904;
  out.push_back({"streamed head", decided_plan(big_vocab, kHeadChunkQuantum, /*mixed=*/true)});
  return out;
}

// Calls check(schedule, what, separate) for every case's executor on the cpu backend (the
// compute tier is host memory) and on emu (a separate compute tier).
template <class Check>
void for_each_schedule(const Check& check) {
  for (const Case& k : cases()) {
    ASSERT_TRUE(k.plan.feasible) << k.what << ": " << k.plan.infeasible_reason;
    for (bool separate : {false, true}) {
      std::unique_ptr<Backend> backend = separate ? make_emu_backend() : make_cpu_backend();
      StreamingOptions so;
      so.offload_dir = std::filesystem::temp_directory_path();
      so.direct_io = false;
      const StreamingExecutor ex(k.plan, *backend, so);
      check(ex.schedule(), k.what + (separate ? " (emu)" : " (cpu)"), separate, k.plan);
    }
  }
}

TEST(StreamingSchedule, EveryArenaRequestHasOneTypedIdSpelledAsItsName) {
  for_each_schedule([](const StreamSchedule& s, const std::string& what, bool /*separate*/, const Plan& plan) {
    ASSERT_EQ(s.arena_keys.size(), s.arena.size()) << what;
    std::set<std::pair<int, int>> seen;
    for (size_t i = 0; i < s.arena.size(); ++i) {
      const ArenaKey& key = s.arena_keys[i];
      EXPECT_TRUE(seen.insert({static_cast<int>(key.tensor), key.index}).second) << what << ": " << s.arena[i].name;
      EXPECT_EQ(s.arena_index(key.tensor, key.index), static_cast<int>(i)) << what << ": " << s.arena[i].name;
      const std::string want = expected_name(key, s.head_chunk_rows > 0, plan);
      if (key.tensor != A::RefetchedMore) {
        EXPECT_EQ(s.arena[i].name, want) << what;
        continue;
      }
      // r.<b>.<k> follows r.<b> (k = 1) or r.<b>.<k-1> in the arena.
      const std::string& name = s.arena[i].name;
      const size_t dot = name.rfind('.');
      ASSERT_TRUE(i > 0 && name.rfind("r.", 0) == 0 && dot > 2) << what << ": " << name;
      const int k = std::stoi(name.substr(dot + 1));
      const std::string before = k == 1 ? name.substr(0, dot) : name.substr(0, dot + 1) + std::to_string(k - 1);
      EXPECT_EQ(s.arena[i - 1].name, before) << what;
    }
    // Every id that looks up names its own request: nothing else answers.
    size_t answering = 0;
    for (int t = 0; t < kArenaTensorKinds; ++t)
      for (int index = -1; index <= static_cast<int>(plan.windows.size()); ++index) {
        const int r = s.arena_index(static_cast<A>(t), index);
        if (r < 0) continue;
        ++answering;
        EXPECT_EQ(static_cast<int>(s.arena_keys[r].tensor), t) << what;
        EXPECT_EQ(s.arena_keys[r].index, index) << what;
      }
    EXPECT_EQ(answering, s.arena.size()) << what;
  });
}

TEST(StreamingSchedule, TypedIdsAreWhatThePlanKeepsWhere) {
  bool offloaded = false, recomputed = false, streamed = false;  // the cases cover each
  for_each_schedule([&](const StreamSchedule& s, const std::string& what, bool separate, const Plan& plan) {
    const auto has = [&](A t, int i = 0) { return s.arena_index(t, i) >= 0; };
    for (int b = 0; b <= s.L; ++b) {
      const BoundarySchedule& bs = s.boundaries[b];
      ASSERT_TRUE(has(A::Boundary, b)) << what << ": boundary " << b;
      EXPECT_EQ(s.arena[s.arena_index(A::Boundary, b)].first_window, bs.produce_w) << what << ": boundary " << b;
      EXPECT_EQ(has(A::Refetched, b), bs.offloaded()) << what << ": boundary " << b;
      EXPECT_EQ(has(A::BoundaryGpuPart, b), bs.offloaded() && bs.gpu_tokens > 0) << what << ": boundary " << b;
      EXPECT_EQ(has(A::Recomputed, b), b > 0 && b < s.L && !bs.stored) << what << ": boundary " << b;
      if (bs.offloaded()) {  // the rows that leave follow those that stay, in forward and in backward
        const size_t row = static_cast<size_t>(s.hidden) * sizeof(float);
        const int head = bs.gpu_tokens > 0 ? s.arena_index(A::BoundaryGpuPart, b) : -1;
        for (A t : {A::Boundary, A::Refetched}) {
          const ArenaRequest& r = s.arena[s.arena_index(t, b)];
          EXPECT_EQ(r.bytes, static_cast<size_t>(s.tokens - bs.gpu_tokens) * row) << what << ": " << r.name;
          EXPECT_EQ(r.follows, head) << what << ": " << r.name;
        }
      }
      offloaded |= bs.offloaded();
      recomputed |= has(A::Recomputed, b);
    }
    for (int j = 0; j < s.L; ++j) {
      EXPECT_EQ(has(A::Internals, j), static_cast<bool>(s.keep_internals[j])) << what << ": layer " << j;
      EXPECT_EQ(has(A::Weights, j), separate) << what << ": layer " << j;
      EXPECT_EQ(has(A::BackwardWeights, j), separate) << what << ": layer " << j;
      EXPECT_EQ(has(A::Gradients, j), separate) << what << ": layer " << j;
      EXPECT_EQ(has(A::RecomputeWeights, j), separate && s.recompute_w[j] >= 0) << what << ": layer " << j;
    }
    for (A t : {A::HeadNormOut, A::HeadRstd, A::HeadDHidden}) EXPECT_TRUE(has(t)) << what;
    ASSERT_TRUE(has(A::Dx, 0) && has(A::Dx, 1) && !has(A::Dx, 2)) << what;
    // Backward alternates between the two from dx.0: after L backwards dx.<L % 2> holds
    // boundary 0's gradient until E; the other is free after B0.
    for (int k : {0, 1}) {
      const ArenaRequest& r = s.arena[s.arena_index(A::Dx, k)];
      EXPECT_EQ(r.first_window, s.head) << what << ": " << r.name;
      EXPECT_EQ(r.last_window, k == s.L % 2 ? s.epilogue : s.backward_w[0]) << what << ": " << r.name;
    }
    EXPECT_EQ(has(A::NormWeights), separate) << what;
    EXPECT_EQ(has(A::LmHead, 0), separate) << what;
    EXPECT_EQ(has(A::LmHead, 1), separate && s.head_chunk_rows > 0) << what;
    EXPECT_EQ(has(A::LmHeadGradients, 1), separate && s.head_chunk_rows > 0) << what;
    streamed |= s.head_chunk_rows > 0;
    // The kernels' scratch: in every window that runs a layer (a BlockWorkspace, aligned,
    // then the layer's saved tensors unless the plan keeps them; a recompute's always) and
    // in HEAD (the cross-entropy's, whole or streamed as the plan holds the head), for that
    // window alone.
    const size_t block = BlockWorkspace(plan.model, plan.batch, plan.seq, cpu_kernel_table()).bytes();
    const size_t layer = (block + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
    EXPECT_EQ(s.workspace_saved_offset, layer) << what;
    const size_t head = head_cross_entropy_workspace_bytes(plan.batch * plan.seq, plan.model.hidden_size,
                                                           plan.model.vocab_size, Precision::F32, s.head_chunk_rows > 0);
    for (size_t w = 0; w < plan.windows.size(); ++w) {
      const WindowKind kind = plan.windows[w].kind;
      const bool layer_pass = kind == WindowKind::Forward || kind == WindowKind::Recompute || kind == WindowKind::Backward;
      const int ws = static_cast<int>(w);
      ASSERT_EQ(has(A::Workspace, ws), layer_pass || kind == WindowKind::Head) << what << ": window " << plan.windows[w].name;
      if (!has(A::Workspace, ws)) continue;
      const ArenaRequest& r = s.arena[s.arena_index(A::Workspace, ws)];
      const int j = plan.windows[w].layer;
      const bool saved_here = layer_pass && (kind == WindowKind::Recompute || !s.keep_internals[j]);
      const size_t saved = saved_here ? block_saved_numel(plan.model, j, plan.batch, plan.seq) * sizeof(float) : 0;
      EXPECT_EQ(r.bytes, layer_pass ? layer + saved : head) << what << ": " << r.name;
      EXPECT_TRUE(r.first_window == ws && r.last_window == ws) << what << ": " << r.name;
    }
    // Outside the kinds' ranges: nothing.
    EXPECT_FALSE(has(A::Boundary, -1)) << what;
    EXPECT_FALSE(has(A::Boundary, s.L + 1)) << what;
  });
  EXPECT_TRUE(offloaded && recomputed && streamed) << "a case should offload a boundary (" << offloaded
                                                    << "), recompute one (" << recomputed << ") and stream the head ("
                                                    << streamed << ")";
}

// A layer's saved-tensor layout: distinct fields at increasing offsets that end where the
// layer's saved tensors end, for every kind of layer (llama, Gemma 3's sandwich norms,
// Qwen3.5's gated attention and Gated DeltaNet).
TEST(BlockSavedLayout, FieldsTileTheLayersSavedTensors) {
  ModelConfig gemma = test::streaming_tiny_config(2);
  gemma.model_type = "gemma3_text";
  gemma.sandwich_norms = true;
  gemma.qk_norm = true;
  gemma.norm_weight_offset = 1.0;
  const ModelConfig qwen35 = test::qwen3_5_tiny_config({LayerKind::LinearAttention, LayerKind::Attention});
  for (const ModelConfig& c : {test::streaming_tiny_config(2), gemma, qwen35}) {
    for (int64_t j = 0; j < c.num_layers; ++j) {
      const BlockSavedLayout layout = block_saved_layout(c, j, kBatch, kSeq);
      ASSERT_FALSE(layout.fields.empty());
      EXPECT_EQ(layout.numel, block_saved_numel(c, j, kBatch, kSeq)) << c.model_type << " layer " << j;
      std::vector<float* BlockSaved::*> members;  // member pointers compare only for equality
      int64_t previous = -1;
      for (const auto& [member, offset] : layout.fields) {
        EXPECT_EQ(std::count(members.begin(), members.end(), member), 0) << c.model_type << " layer " << j
                                                                          << ": a field twice";
        members.push_back(member);
        EXPECT_GT(offset, previous) << c.model_type << " layer " << j;
        previous = offset;
      }
      EXPECT_LT(previous, layout.numel) << c.model_type << " layer " << j;
      // Binding places each field at its offset from the buffer.
      std::vector<float> buffer(static_cast<size_t>(layout.numel));
      const BlockSaved saved = bind_block_saved(layout, buffer.data());
      for (const auto& [member, offset] : layout.fields) EXPECT_EQ(saved.*member, buffer.data() + offset);
    }
  }
}

}  // namespace
}  // namespace lt
