// Data-parallel training over MPI (issue 29, part A): `mpirun -np 2 lazytrain train` against
// one process with the same global batch. Runs the built lazytrain under Open MPI's mpirun
// (--oversubscribe: this machine may have fewer cores than ranks); skips, saying why, where
// mpirun or the MPI build is missing.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../train/out_of_core_plan.h"
#include "../train/train_test_util.h"
#include "exec/streaming_executor.h"
#include "model/checkpoint.h"
#include "plan/plan_json.h"
#include "test_util.h"

namespace lt {
namespace {

namespace fs = std::filesystem;

[[maybe_unused]] std::string find_mpirun() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && access((dir + "/mpirun").c_str(), X_OK) == 0) return dir + "/mpirun";
  return {};
}

// Why these tests cannot run here, or empty.
std::string skip_reason() {
#ifndef LT_HAVE_MPI
  return "lazytrain was built without MPI (install libopenmpi-dev and configure again)";
#else
  if (find_mpirun().empty()) return "no mpirun on PATH (install openmpi-bin)";
  return {};
#endif
}

// The environment an mpirun command line starts with. Open MPI refuses root without the
// first two (CI runs as root); harmless otherwise. In the sanitized build (.ci/run) the
// ranks run without LeakSanitizer: Open MPI 4.1 and its PMIx load their components with
// dlopen and unload them in MPI_Finalize, which leaves about 120 kB in 3,350 allocations
// whose stacks end in unloaded modules (seen here), so no suppression can name the
// library. AddressSanitizer's other checks and UBSan stay on in the ranks; the
// one-process runs keep leak checking.
std::string mpirun_env() {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
         "ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0\" ";
}

std::string lazytrain_train(const std::string& flags) {
  return std::string(LT_BINARY_DIR) + "/lazytrain train " + flags + " 2>&1";
}

// Runs lazytrain train with `flags`, under mpirun with `ranks` processes (0: directly).
// env: NAME=value assignments for the command.
test::ShellResult train(int ranks, const std::string& flags, const std::string& env = "") {
  std::string cmd = env + " timeout 300 ";
  if (ranks > 0)
    cmd = mpirun_env() + cmd + find_mpirun() + " -np " + std::to_string(ranks) + " --oversubscribe ";
  return test::run_shell(cmd + lazytrain_train(flags));
}

// The step records (loss, lr, grad_norm) of a run's metrics.jsonl, in step order.
std::vector<nlohmann::json> step_records(const std::string& dir) {
  std::vector<nlohmann::json> out;
  std::istringstream in(test::read_file(dir + "/metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    const auto r = nlohmann::json::parse(line);
    if (r.contains("loss")) out.push_back(r);
  }
  return out;
}

std::string scratch_dir(const std::string& name) {
  const fs::path d = fs::path(LT_BINARY_DIR) / "test-scratch" / "data-parallel" / name;
  fs::remove_all(d);
  fs::create_directories(d.parent_path());
  return d.string();
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A tiny from-scratch model in fp32 with plain SGD, every step logged.
const std::string kTinyFlags =
    "--scratch-hidden 32 --scratch-layers 2 --scratch-heads 4 --scratch-kv-heads 2 --scratch-intermediate 64 "
    "--seq-len 64 --synthetic-train-problems 300 --eval-problems 0 --log-every 1 --warmup-steps 0 ";

// Bounds. The two runs sum each gradient's per-token terms in other groupings (two halves of
// the rows, then rank 0's half + rank 1's, against one pass over all rows), so they differ
// only by fp32 summation order: the fp32 bounds for two implementations of the same
// step, 1e-5 on the loss and 1e-4 norm-wise on a gradient, hold for them. Clipping to norm c
// scales the gradient by min(1, c / ||g||), which at most doubles its relative error. Then
// with SGD (w -= lr * clipped g), the weights after step s differ by at most
//   D_s = (1 + lr ||H||) D_{s-1} + 2e-4 lr_s min(||g_s||, c),
// where the first term carries earlier differences through the next gradient; a stable
// step has lr ||H|| < 1, so the factor is taken as 2. A step's loss differs by at most
// 1e-5 L_s plus ||g_s|| D_{s-1} (its first-order change with the weights it starts from).
constexpr double kLossTol = 1e-5, kGradTol = 1e-4;

TEST(DataParallel, TwoRanksMatchOneRankWithinTheSummationBound) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const std::string one = scratch_dir("one"), two = scratch_dir("two");
  const double lr = 0.05, clip = 1.0;
  const std::string flags = kTinyFlags + "--precision f32 --optimizer sgd --batch 4 --steps 4 --lr 0.05 " +
                            "--max-grad-norm 1 ";
  const test::ShellResult a = train(0, flags + "--output-dir " + one);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const test::ShellResult b = train(2, flags + "--output-dir " + two + " --summary-json " + two + "/summary.json");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("data parallel: 2 ranks over MPI"), std::string::npos) << b.output;
  EXPECT_NE(b.output.find("), 2 on this host; rank r runs rows"), std::string::npos) << b.output;
  EXPECT_NE(b.output.find("the 2 ranks' weights agree bit for bit"), std::string::npos) << b.output;
  EXPECT_EQ(count(b.output, "done: "), 1u) << "only rank 0 prints\n" << b.output;
  const nlohmann::json summary = nlohmann::json::parse(test::read_file(two + "/summary.json"));
  EXPECT_EQ(summary.at("world_size"), 2);

  const auto ra = step_records(one), rb = step_records(two);
  ASSERT_EQ(ra.size(), 4u);
  ASSERT_EQ(rb.size(), 4u);
  double weight_bound = 0;  // D_{s-1}
  for (size_t s = 0; s < ra.size(); ++s) {
    const double la = ra[s]["loss"], lb = rb[s]["loss"], g = ra[s]["grad_norm"], gb = rb[s]["grad_norm"];
    const double loss_bound = kLossTol * std::fabs(la) + g * weight_bound;
    EXPECT_LE(std::fabs(la - lb), loss_bound) << "step " << s + 1;
    EXPECT_LE(std::fabs(g - gb), kGradTol * g + weight_bound * g) << "gradient norm, step " << s + 1;
    std::printf("step %zu: loss %.9g vs %.9g (|diff| %.3g, bound %.3g), gradient norm %.9g vs %.9g\n", s + 1, la, lb,
                std::fabs(la - lb), loss_bound, g, gb);
    weight_bound = 2 * weight_bound + 2 * kGradTol * lr * std::min(g, clip);
  }
  const std::vector<float> wa = test::final_weights(one + "/checkpoint-000004"),
                           wb = test::final_weights(two + "/checkpoint-000004");
  ASSERT_EQ(wa.size(), wb.size());
  // Rank 0 sends the other rank the gradients of the other rank's part, then the updated
  // weights of its own: 4 bytes per parameter and step; and 8 bytes for each of the squared
  // norm's terms (the head's final norm, 2 layers, the tied embedding) and the loss.
  EXPECT_EQ(summary.at("collective_bytes_per_step").get<double>(), 4.0 * static_cast<double>(wa.size()) + 8 * 5);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < wa.size(); ++i) {
    diff += (double(wa[i]) - wb[i]) * (double(wa[i]) - wb[i]);
    norm += double(wa[i]) * wa[i];
  }
  std::printf("final weights: ||difference|| %.3g (bound %.3g), ||w|| %.3g\n", std::sqrt(diff), weight_bound,
              std::sqrt(norm));
  EXPECT_LE(std::sqrt(diff), weight_bound);
}

// The default precision and optimizer (bf16 matmuls, 8-bit AdamW) with gradient
// accumulation and a checkpoint midway: the ranks agree bit for bit at every checkpoint
// (lazytrain checks and stops otherwise), and the run resumes.
TEST(DataParallel, RanksAgreeUnderTheDefaultsAndResume) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const std::string dir = scratch_dir("defaults");
  const std::string flags = kTinyFlags + "--batch 4 --grad-accum 2 --save-every 2 --output-dir " + dir;
  const test::ShellResult a = train(2, flags + " --steps 2");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(count(a.output, "weights agree bit for bit"), 1u) << a.output;
  const test::ShellResult b = train(2, flags + " --steps 4 --resume");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("resumed from"), std::string::npos) << b.output;
  EXPECT_EQ(count(b.output, "weights agree bit for bit"), 1u) << b.output;  // at step 4
  EXPECT_TRUE(fs::exists(dir + "/checkpoint-000004/model.safetensors"));
}

// The optimizer sharded over 2 ranks (the default) against every rank holding all of it
// (--shard-optimizer off), under the default precision and optimizer (bf16, 8-bit AdamW)
// with 2 micro-batches a step: rank 0 holds about half the states, and the weights and
// the checkpoint's optimizer.bin are the same bits (the sharded run sums each part's
// gradient to its owner under the last micro-batch's backward and broadcasts the updated
// part under the next forward; the other sums all of it after backward). A sharded checkpoint resumes unsharded, and in one process.
TEST(DataParallel, TheShardedOptimizerHoldsHalfTheStatesAndChangesNoBit) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const std::string sharded = scratch_dir("sharded"), whole = scratch_dir("unsharded"),
                    resumed = scratch_dir("sharded-resumed"), one = scratch_dir("sharded-one-process"),
                    in_rounds = scratch_dir("sharded-in-rounds");
  const int64_t C = 128, I = 256, KV = 64, L = 8;  // KV: 2 key/value heads of 128 / 4
  const std::string flags = "--scratch-hidden 128 --scratch-layers 8 --scratch-heads 4 --scratch-kv-heads 2 "
                            "--scratch-intermediate 256 --seq-len 64 --synthetic-train-problems 300 --eval-problems 0 "
                            "--log-every 1 --warmup-steps 0 --batch 4 --grad-accum 2 --save-every 2 --output-dir ";
  const test::ShellResult a = train(2, flags + sharded + " --steps 4 --summary-json " + sharded + "/summary.json");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_NE(a.output.find("optimizer sharded over the ranks (ZeRO-1): rank 0 keeps and updates embed, layers 0-"),
            std::string::npos)
      << a.output;
  const test::ShellResult b =
      train(2, flags + whole + " --steps 4 --shard-optimizer off --summary-json " + whole + "/summary.json");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(b.output.find("optimizer sharded"), std::string::npos) << b.output;
  // And sharded again with the collectives in rounds of 1000 floats (500 per part), where
  // the parts end in different rounds.
  const test::ShellResult rounds = train(2, flags + in_rounds + " --steps 4", "LT_TEST_CHUNK_FLOATS=1000");
  ASSERT_EQ(rounds.exit_code, 0) << rounds.output;
  for (const std::string& other : {whole, in_rounds})
    for (const char* ck : {"/checkpoint-000002", "/checkpoint-000004"}) {
      EXPECT_EQ(test::final_weights(sharded + ck), test::final_weights(other + ck)) << other << ck;
      EXPECT_TRUE(test::read_file(sharded + ck + "/optimizer.bin") == test::read_file(other + ck + "/optimizer.bin"))
          << other << ck;
    }

  // Rank 0's share of the states. The parts are whole targets, cut at the boundary nearest
  // half of the states, so rank 0 is off half by at most half the largest target: a layer
  // here (the embedding, 425 x 128, is smaller). 8-bit states: 2 bytes per parameter and an
  // fp32 absmax for m and for v per 256; the norms (128 < 4096 parameters) keep fp32 m and v.
  auto q8 = [](int64_t n) { return 2.0 * n + 8.0 * ((n + 255) / 256); };
  const double layer = 2 * q8(C * C) + 2 * q8(C * KV) + 3 * q8(C * I) + 2 * 8.0 * C;
  const double mine = nlohmann::json::parse(test::read_file(sharded + "/summary.json")).at("optimizer_state_bytes"),
               all = nlohmann::json::parse(test::read_file(whole + "/summary.json")).at("optimizer_state_bytes");
  std::printf("rank 0 holds %.0f of %.0f bytes of optimizer states (%.3f; a layer's are %.3f of them)\n", mine, all,
              mine / all, layer / all);
  EXPECT_LE(std::fabs(mine / all - 0.5), layer / all / 2);
  const double hidden =
      nlohmann::json::parse(test::read_file(sharded + "/summary.json")).at("collective_hidden_frac");
  std::printf("%.0f%% of rank 0's collective time ran under compute\n", 100 * hidden);
  EXPECT_LT(L * layer, all);  // the layers are most of the states: the bound says something

  // Resumed from the sharded step-2 checkpoint: unsharded on 2 ranks, the bits of the
  // uninterrupted runs; in one process, it loads and trains on.
  for (const std::string& dir : {resumed, one}) {
    fs::create_directories(dir);
    fs::copy(sharded + "/checkpoint-000002", dir + "/checkpoint-000002", fs::copy_options::recursive);
  }
  const test::ShellResult c = train(2, flags + resumed + " --steps 4 --resume --shard-optimizer off");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("resumed from"), std::string::npos) << c.output;
  EXPECT_EQ(test::final_weights(resumed + "/checkpoint-000004"), test::final_weights(sharded + "/checkpoint-000004"));
  const test::ShellResult d = train(0, flags + one + " --steps 3 --resume");
  ASSERT_EQ(d.exit_code, 0) << d.output;
  EXPECT_NE(d.output.find("resumed from"), std::string::npos) << d.output;
}

// The streamed tests' flags: a tiny from-scratch model of `layers` layers, 4 steps of
// batch 4 in `grad_accum` micro-batches, a checkpoint every 2; the output directory follows.
std::string streamed_flags(int layers, int grad_accum, const std::string& base) {
  return "--scratch-hidden 32 --scratch-layers " + std::to_string(layers) +
         " --scratch-heads 4 --scratch-kv-heads 2 --scratch-intermediate 64 --seq-len 64 "
         "--synthetic-train-problems 300 --eval-problems 0 --log-every 1 --warmup-steps 0 --batch 4 --grad-accum " +
         std::to_string(grad_accum) + " --save-every 2 --steps 4 --offload-dir " + base + " --output-dir ";
}

// Both checkpoints of a streamed test's run hold the reference's weights and optimizer.bin.
void expect_same_checkpoints(const std::string& run, const std::string& reference) {
  for (const char* ck : {"/checkpoint-000002", "/checkpoint-000004"}) {
    EXPECT_EQ(test::final_weights(run + ck), test::final_weights(reference + ck)) << run << ck;
    EXPECT_TRUE(test::read_file(run + ck + "/optimizer.bin") == test::read_file(reference + ck + "/optimizer.bin"))
        << run << ck;
  }
}

// What share of rank 0's collective time a run's --summary-json says ran under compute
// (the machine's load decides it: printed, not checked).
void print_hidden_share(const std::string& what, const std::string& summary_json) {
  const double hidden = nlohmann::json::parse(test::read_file(summary_json)).at("collective_hidden_frac");
  std::printf("%s: %.0f%% of rank 0's collective time ran under compute\n", what.c_str(), 100 * hidden);
}

// A streamed plan under mpirun (issue 29 part B): each rank runs the plan (made for its 2
// of the 4 rows) on its rows of every micro-batch, and the sums are the in-memory engine's
// (train/rank_exchange.h), so the run is bitwise the in-memory run on 2 ranks at every
// checkpoint, weights and optimizer.bin, under the default precision and optimizer (bf16,
// 8-bit AdamW) with 2 micro-batches a step: sharded (each target's gradient sum to its
// owner under backward, each rank's part updated after the step and sent under the next),
// on the cpu and emu backends, and resumed from the first checkpoint; and unsharded with
// the top layers' optimizer states paged from NVMe. A plan for the whole batch, one that
// pages states under a sharded optimizer, and a compute budget too small are clear errors.
TEST(DataParallel, StreamedPlansTrainBitwiseAsTheInMemoryRun) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const std::string base = scratch_dir("streamed"), mem = base + "/in-memory",
                    mem_whole = base + "/in-memory-unsharded";
  const std::string flags = streamed_flags(6, 2, base);
  const test::ShellResult a = train(2, flags + mem);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const test::ShellResult b = train(2, flags + mem_whole + " --shard-optimizer off");
  ASSERT_EQ(b.exit_code, 0) << b.output;

  const ModelConfig mc = load_model_config(mem + "/checkpoint-000002");
  const Plan streamed = test::out_of_core_plan(mc, 2, 64, false), paging = test::out_of_core_plan(mc, 2, 64, true),
             whole_batch = test::out_of_core_plan(mc, 4, 64, false);
  ASSERT_TRUE(streamed.feasible && paging.feasible && whole_batch.feasible);
  const Plan::TierCounts tc = streamed.tier_counts();
  ASSERT_GT(tc.cpu + tc.nvme + tc.recompute, 0) << "the plan keeps every boundary on the compute tier";
  ASSERT_FALSE(paging.nvme_state_layers.empty());
  save_plan(streamed, base + "/streamed.json");
  save_plan(paging, base + "/paging.json");
  save_plan(whole_batch, base + "/whole-batch.json");
  const std::string plan = " --plan " + base + "/streamed.json";

  for (const std::string backend : {"cpu", "emu"}) {
    const std::string dir = base + "/sharded-" + backend;
    const test::ShellResult r = train(2, flags + dir + plan + " --backend " + backend +
                                             " --summary-json " + dir + ".json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("streaming;"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("re-planning: off (under data parallelism"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(backend == "emu" ? "gradient sums over the ranks: on the host after the last of the 2 "
                                             : "gradient sums over the ranks: on the host, where backward writes"),
              std::string::npos)
        << r.output;
    expect_same_checkpoints(dir, mem);
    print_hidden_share(backend, dir + ".json");  // the gradient sums run on the background thread under backward
  }
  // A plan that counts the two ranks' exchange (plan --ranks 2): the same bits; a run
  // whose optimizer is not sharded as the plan's is an error.
  const Plan counted = test::out_of_core_plan(mc, 2, 64, false, 2, true);
  ASSERT_TRUE(counted.feasible && counted.ranks == 2 && counted.shard_optimizer);
  save_plan(counted, base + "/counted.json");
  {
    const std::string dir = base + "/sharded-counted";
    const test::ShellResult r = train(2, flags + dir + " --plan " + base + "/counted.json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    expect_same_checkpoints(dir, mem);
    const test::ShellResult e = train(2, flags + base + "/bad4 --shard-optimizer off --plan " + base + "/counted.json");
    EXPECT_NE(e.exit_code, 0);
    EXPECT_NE(e.output.find("the plan is for 2 ranks with the optimizer sharded, this run has 2 with it on every rank"),
              std::string::npos)
        << e.output;
  }
  const std::string resumed = base + "/sharded-resumed";
  fs::create_directories(resumed);
  fs::copy(base + "/sharded-cpu/checkpoint-000002", resumed + "/checkpoint-000002", fs::copy_options::recursive);
  const test::ShellResult r = train(2, flags + resumed + plan + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  EXPECT_EQ(test::final_weights(resumed + "/checkpoint-000004"), test::final_weights(mem + "/checkpoint-000004"));

  const std::string paged = base + "/unsharded-paged";
  const test::ShellResult p = train(2, flags + paged + " --shard-optimizer off --plan " + base + "/paging.json");
  ASSERT_EQ(p.exit_code, 0) << p.output;
  expect_same_checkpoints(paged, mem_whole);

  const test::ShellResult e1 = train(2, flags + base + "/bad1 --plan " + base + "/whole-batch.json");
  EXPECT_NE(e1.exit_code, 0);
  EXPECT_NE(e1.output.find("the plan is for batch 4, the whole batch; each of the 2 ranks runs 2 of its rows"),
            std::string::npos)
      << e1.output;
  const test::ShellResult e2 = train(2, flags + base + "/bad2 --plan " + base + "/paging.json");
  EXPECT_NE(e2.exit_code, 0);
  EXPECT_NE(e2.output.find("--shard-optimizer off, or plan with --nvme-state-layers 0"), std::string::npos)
      << e2.output;
  // A compute budget no plan fits: rank 0 says so for one rank's rows.
  const test::ShellResult e3 = train(2, flags + base + "/bad3 --compute-budget-gb 0.0001 --hardware " +
                                            std::string(LT_TESTS_DIR) + "/../profiles/h800.json");
  EXPECT_NE(e3.exit_code, 0);
  EXPECT_NE(e3.output.find("compute-tier memory short by"), std::string::npos) << e3.output;
  EXPECT_NE(e3.output.find("(for each rank's 2 rows)"), std::string::npos) << e3.output;
}

// One micro-batch a step on a separate compute tier (emu): the layers' and the head's
// gradients are summed over the ranks in their slots before they drain (issue 29 part C;
// on emu in rank order through MPI, on the background thread, where a GPU sums with NCCL),
// the embedding's on the host, and the run is bitwise the in-memory run on 2 ranks,
// sharded and unsharded; sharded, a slot's sum goes to its owner alone, so rank 0 sends
// no more than unsharded (counted in bytes below).
TEST(DataParallel, SlotsSummedOnTheComputeTierTrainBitwiseAsTheInMemoryRun) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const std::string base = scratch_dir("compute-tier-sums"), mem = base + "/in-memory";
  const std::string flags = streamed_flags(4, 1, base);
  const test::ShellResult a = train(2, flags + mem);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const ModelConfig mc = load_model_config(mem + "/checkpoint-000002");
  const Plan streamed = test::out_of_core_plan(mc, 2, 64, false);
  ASSERT_TRUE(streamed.feasible) << streamed.infeasible_reason;
  save_plan(streamed, base + "/streamed.json");
  double bytes_per_step[2] = {0, 0};  // rank 0's, sharding on and off
  for (const std::string sharding : {"on", "off"}) {
    const std::string dir = base + "/emu-sharded-" + sharding;
    const test::ShellResult r = train(2, flags + dir + " --plan " + base + "/streamed.json --backend emu" +
                                             " --shard-optimizer " + sharding + " --summary-json " + dir + ".json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // The slots' sums run on the background thread under backward (each drain's copy waits
    // for its sum on the copy thread).
    print_hidden_share("sharding " + sharding, dir + ".json");
    EXPECT_NE(r.output.find("gradient sums over the ranks: the layers' and the head's on the compute tier before "
                            "they drain (the emu backend's host memory, in rank order)"),
              std::string::npos)
        << r.output;
    expect_same_checkpoints(dir, mem);
    bytes_per_step[sharding == "off"] =
        nlohmann::json::parse(test::read_file(dir + ".json")).at("collective_bytes_per_step").get<double>();
  }
  // Each parameter leaves rank 0 once a step either way: sharded its gradient to the owner
  // (a slot's sum goes to the owner alone) or its weights from it; unsharded its gradient
  // to the slot's turn owner or the sum from it. Sharded also sends the norm's per-target
  // terms (8 bytes each) where unsharded sends its norm from the whole sum.
  const double terms = static_cast<double>(ordered_grad_sq_terms(ModelParameters(mc)).size());
  EXPECT_EQ(bytes_per_step[0], bytes_per_step[1] + 8 * terms);
  // A plan for two ranks that counts the sums on the host (plan --gradient-sums host): the
  // run sums in the slots all the same, the same bits, and says the prediction is off.
  const Plan host_sums = test::out_of_core_plan(mc, 2, 64, false, 2, true);
  ASSERT_TRUE(host_sums.feasible && host_sums.ranks == 2 && !host_sums.slot_sums);
  save_plan(host_sums, base + "/host-sums.json");
  const std::string dir = base + "/emu-host-sums-plan";
  const test::ShellResult r = train(2, flags + dir + " --plan " + base + "/host-sums.json --backend emu");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("in rank order), each to its owner, the embedding's on the host; the plan counted them on "
                          "the host, so its prediction is off"),
            std::string::npos)
      << r.output;
  expect_same_checkpoints(dir, mem);
}

// A rank killed mid-run (SIGKILL as its step 5 starts): the job ends within a bounded time
// (mpirun ends the other rank and names the dead one) instead of hanging in a collective,
// the checkpoint of step 4 stays complete, and resuming from it gives bitwise the weights
// of a run that was never killed.
TEST(DataParallel, AKilledRankEndsTheJobAndTheRunResumes) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const std::string killed = scratch_dir("killed"), whole = scratch_dir("whole");
  const std::string flags = kTinyFlags + "--batch 4 --steps 6 --save-every 2 --output-dir ";
  const auto t0 = std::chrono::steady_clock::now();
  const test::ShellResult a = train(2, flags + killed, "LT_TEST_KILL_RANK_AT_STEP=1:5");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(a.exit_code, 0) << a.output;
  EXPECT_LT(seconds, 60) << a.output;
  EXPECT_NE(a.output.find("rank 1"), std::string::npos) << "the dead rank is named\n" << a.output;
  EXPECT_TRUE(fs::exists(killed + "/checkpoint-000004/model.safetensors")) << a.output;
  EXPECT_FALSE(fs::exists(killed + "/checkpoint-000006")) << a.output;

  const test::ShellResult b = train(2, flags + killed + " --resume");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("resumed from"), std::string::npos) << b.output;
  const test::ShellResult c = train(2, flags + whole);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_EQ(test::final_weights(killed + "/checkpoint-000006"), test::final_weights(whole + "/checkpoint-000006"));
}

// Two hosts for real: two network namespaces joined by a veth pair, one rank in each,
// Open MPI over TCP between them (mpirun in the first starts the second's daemon through
// an rsh agent that enters that namespace, where ssh would log in to another machine).
// The rank-order sums make the result independent of the transport: the weights equal
// those of two ranks on one host, bit for bit. Each rank is the only one on its host (the
// layout a rank's GPU is chosen by). Needs root (ip netns); skips otherwise.
TEST(DataParallel, TwoHostsInNetworkNamespacesOverTcpMatchOneHost) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root (ip netns)";
  if (test::run_shell("command -v ip").exit_code != 0) GTEST_SKIP() << "no ip command (install iproute2)";
  const std::string tag = std::to_string(getpid() % 100000);
  const std::string ns_a = "ltdp_a" + tag, ns_b = "ltdp_b" + tag, ip_a = "10.231.77.1", ip_b = "10.231.77.2";
  struct Cleanup {
    std::string a, b;
    ~Cleanup() { test::run_shell("ip netns del " + a + " 2>/dev/null; ip netns del " + b + " 2>/dev/null"); }
  } cleanup{ns_a, ns_b};
  const test::ShellResult net = test::run_shell(
      "set -e; ip netns add " + ns_a + "; ip netns add " + ns_b + "; ip link add lta" + tag +
      " type veth peer name ltb" + tag + "; ip link set lta" + tag + " netns " + ns_a + "; ip link set ltb" + tag +
      " netns " + ns_b + "; ip -n " + ns_a + " addr add " + ip_a + "/24 dev lta" + tag + "; ip -n " + ns_b +
      " addr add " + ip_b + "/24 dev ltb" + tag + "; for n in " + ns_a + " " + ns_b + "; do ip -n $n link set lo up; " +
      "done; ip -n " + ns_a + " link set lta" + tag + " up; ip -n " + ns_b + " link set ltb" + tag + " up 2>&1");
  if (net.exit_code != 0) GTEST_SKIP() << "cannot make network namespaces here: " << net.output;

  const std::string dir = scratch_dir("two-hosts"), one_host = scratch_dir("one-host");
  fs::create_directories(dir);
  // The rsh agent: "agent [options] HOST COMMAND..." runs COMMAND in HOST's namespace and
  // notes that it did.
  const std::string agent = dir + "-agent.sh", marker = dir + "-agent.log";
  fs::remove(marker);  // a stale one from an earlier run must not vouch for this one
  std::ofstream(agent) << "#!/bin/sh\n"
                          "while [ $# -gt 0 ]; do case \"$1\" in -*) shift ;; *) break ;; esac; done\n"
                          "host=$1; shift\n"
                          "case \"$host\" in " << ip_a << ") ns=" << ns_a << " ;; " << ip_b << ") ns=" << ns_b
                       << " ;; *) echo \"unknown host $host\" >&2; exit 1 ;; esac\n"
                          "echo \"$host $ns\" >> " << marker << "\n"
                          "exec ip netns exec \"$ns\" /bin/sh -c \"$*\"\n";
  fs::permissions(agent, fs::perms::owner_all);
  const std::string flags = kTinyFlags + "--batch 4 --steps 3 --output-dir ";
  const std::string tcp = " --mca btl tcp,self --mca btl_tcp_if_include 10.231.77.0/24 --mca oob_tcp_if_include "
                          "10.231.77.0/24 ";
  const test::ShellResult two = test::run_shell(
      mpirun_env() + " timeout 120 ip netns exec " + ns_a + " " + find_mpirun() + " -np 2 --host " + ip_a + ":1," +
      ip_b + ":1 --mca plm_rsh_agent " + agent + tcp + lazytrain_train(flags + dir));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(test::read_file(marker).find(ip_b + " " + ns_b), std::string::npos)
      << "the second rank's daemon did not start in " << ns_b;
  EXPECT_NE(two.output.find("weights agree bit for bit"), std::string::npos) << two.output;
  EXPECT_NE(two.output.find("), 1 on this host; rank r runs rows"), std::string::npos)
      << "each namespace is a host of its own\n" << two.output;
  const test::ShellResult one = train(2, flags + one_host);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_EQ(test::final_weights(dir + "/checkpoint-000003"), test::final_weights(one_host + "/checkpoint-000003"));
}

// `lazytrain bench dp` on a tiny model, in memory and streamed (each run planned for a
// 1 GB compute tier on the h800 profile) on the cpu backend and on emu (whose ranks sum the
// gradients in their compute-tier slots, which the bench says): it runs its three
// trainings and reports, and the sharded run's weights are the unsharded run's (its speed
// and overlap figures are measurements, for the bench's reader, not checked here). Without
// its PyTorch peer (--no-peer: three more Python runs), which it says.
TEST(DataParallel, BenchDpReportsAndItsShardedRunEqualsTheUnsharded) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const std::string bench =
      mpirun_env() + "timeout 300 " + std::string(LT_BINARY_DIR) +
      "/lazytrain bench dp --hidden 32 --layers 2 --intermediate 64 --batch 4 --seq 64 --steps 2 --no-peer";
  const std::string streamed =
      " --compute-budget-gb 1 --hardware " + std::string(LT_TESTS_DIR) + "/../profiles/h800.json";
  for (const std::string& mode : {std::string(), streamed, streamed + " --backend emu"}) {
    const bool emu = mode.find("emu") != std::string::npos;
    const std::string dir = scratch_dir(mode.empty() ? "bench" : emu ? "bench-streamed-emu" : "bench-streamed");
    const test::ShellResult r = test::run_shell(bench + mode + " --output-dir " + dir + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("RESULT dp ranks=2 hidden_frac="), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(" equal=true "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("PyTorch peer skipped: --no-peer"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(mode.empty() ? " streamed=false" : " streamed=true"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(emu ? " backend=emu" : " backend=cpu"), std::string::npos) << r.output;
    if (mode.empty()) continue;
    EXPECT_NE(r.output.find(emu ? "gradient sums over the ranks (sharded run): the layers' and the head's on the "
                                  "compute tier before they drain"
                                : "gradient sums over the ranks (sharded run): on the host, where backward writes"),
              std::string::npos)
        << r.output;
    // Rank 0 planned for the two ranks' exchange, at the link rate it measured.
    for (const char* run : {"sharded", "unsharded"}) {
      const std::string log = test::read_file(dir + "/" + run + ".log");
      EXPECT_NE(log.find("the plan counts the ranks' exchange at"), std::string::npos) << log;
      const Plan p = load_plan(dir + "/" + run + "/plan.json");
      EXPECT_EQ(p.ranks, 2) << run;
      EXPECT_EQ(p.shard_optimizer, std::string(run) == "sharded") << run;
      EXPECT_GT(p.hardware.network_bw, 0) << run;
    }
  }
  const test::ShellResult no_plan = test::run_shell(bench + " --backend emu 2>&1");
  EXPECT_NE(no_plan.exit_code, 0);
  EXPECT_NE(no_plan.output.find("--backend emu streams through a plan, and there is none"), std::string::npos)
      << no_plan.output;
}

TEST(DataParallel, ABatchTheRanksCannotShareIsAClearError) {
  if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const test::ShellResult r = train(2, kTinyFlags + "--batch 3 --steps 1 --output-dir " + scratch_dir("odd"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("batch 3 does not divide among 2 ranks"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace lt
