// Plans no other test uses: random decisions (each boundary kept, split over the three
// tiers in random fractions, or recomputed; random kept internals; a random number of
// paged optimizer states), turned into plans by the builder with the ASAP transfer rule.
// Every such plan is valid, the simulator replays it without a violation, and five
// training steps under it match the in-memory run bitwise, on the cpu and emu backends.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "exec/backend.h"
#include "plan/default_schedule.h"
#include "plan/plan_builder.h"
#include "plan/plan_evaluate.h"
#include "plan/plan_validate.h"
#include "sim/simulator.h"
#include "streaming_test_util.h"
#include "streaming_trajectory.h"

namespace lt {
namespace {

using namespace streaming_test;

Plan random_plan(const ModelConfig& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int L = static_cast<int>(c.num_layers);
  PlanRequest req = request(c);
  req.nvme_state_layers = std::uniform_int_distribution<int>(0, L - 2)(rng);
  const CostModel cm = build_cost_model(req);
  Decisions d = all_gpu_decisions(L, "random-" + std::to_string(seed));
  std::uniform_real_distribution<double> u(0, 1);
  for (int b = 1; b < L; ++b) {
    const double r = u(rng);
    if (r < 0.3) {
      d.boundaries[b] = BoundaryPlacement{true, 0, 0, 0};
    } else if (r > 0.5) {  // a random three-way split (some parts may round to no token)
      const double g = u(rng), h = u(rng), n = u(rng), sum = g + h + n;
      d.boundaries[b] = BoundaryPlacement{false, g / sum, h / sum, n / sum};
    }
  }
  if (u(rng) < 0.5) d.boundaries[0] = BoundaryPlacement{false, 0.5, 0.25, 0.25};
  for (int j = 0; j < L; ++j) d.keep_internals[j] = u(rng) < 0.4;
  if (!assign_asap_traffic(d, cm)) return Plan{};  // an NVMe chain that does not fit: not a plan
  Plan p = build_plan(req, cm, d);
  evaluate_plan(p);
  return p;
}

TEST(StreamingRandomPlans, AnyValidPlanTrainsBitwiseLikeInMemory) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("lt-streaming-random-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const ModelConfig c = test::streaming_tiny_config(6);
  const RunOptions eight_bit{.eight_bit = true};
  const Trajectory ref = run_reference(c, eight_bit);
  int ran = 0;
  for (uint64_t seed = 1; ran < 8 && seed < 100; ++seed) {
    const Plan p = random_plan(c, seed);
    if (p.windows.empty()) continue;
    SCOPED_TRACE("seed " + std::to_string(seed));
    const auto problems = validate_plan(p);
    ASSERT_TRUE(problems.empty()) << problems.front();
    const SimResult sim = simulate_plan(p);
    EXPECT_TRUE(sim.violations.empty()) << sim.violations.front();
    const bool emu = ran % 2 == 1;
    const Plan::TierCounts tc = p.tier_counts();
    std::printf("[random plan %llu] %s: boundaries gpu %.2f cpu %.2f nvme %.2f recomputed %.0f; %zu keep internals; "
                "%zu paged optimizer states\n",
                static_cast<unsigned long long>(seed), emu ? "emu" : "cpu", tc.gpu, tc.cpu, tc.nvme, tc.recompute,
                p.keep_internals.size(), p.nvme_state_layers.size());
    expect_bitwise_equal(run_streaming(c, p, dir, emu ? make_emu_backend(5, 5) : make_cpu_backend(), eight_bit), ref,
                         std::string(emu ? "emu" : "cpu") + " random plan " + std::to_string(seed));
    ++ran;
  }
  EXPECT_EQ(ran, 8) << "too few random decisions made a plan";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace lt
