// The largest feasible batch on an RTX 3090 (24 GB) for the paper's four models and two MoE
// models (qwen3-30b-a3b, mixtral-8x7b), MegaTrain's rule vs the MILP, at seq 1024, as the
// LazyTrain paper reports (+1 batch at each size).
// A benchmark, not a test: it prints the table and the tokens/s at each batch.
//   plan_max_batch_bench [profile] [seq] [model]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "plan/model_preset.h"
#include "plan/planner.h"

int main(int argc, char** argv) {
  using namespace lt;
  std::string hardware = argc > 1 ? argv[1] : "rtx3090";
  int64_t seq = argc > 2 ? std::atoll(argv[2]) : 1024;
  std::printf("largest feasible batch on %s, seq %lld (paper, RTX 3090: 3B 7/8, 7B 5/6, 14B 3/4, 27B 1/2)\n",
              hardware.c_str(), static_cast<long long>(seq));
  std::printf("%-14s %10s %12s %10s %12s %8s\n", "model", "megatrain", "tok/s", "milp", "tok/s", "gain");
  for (const char* model : {"qwen2.5-3b", "qwen2.5-7b", "qwen2.5-14b", "qwen3.6-27b", "qwen3-30b-a3b", "mixtral-8x7b"}) {
    if (argc > 3 && std::string(argv[3]) != model) continue;
    PlanRequest req;
    ResolvedModel m = resolve_model(model);
    req.model_name = m.name;
    req.model = m.config;
    req.hardware = load_hardware_profile(hardware);
    req.seq = seq;
    req.time_limit_s = 5;
    int64_t mb = largest_feasible_batch(req, "megatrain");
    int64_t lb = largest_feasible_batch(req, "milp");
    auto tps = [&](const std::string& policy, int64_t batch) {
      if (batch <= 0) return 0.0;
      PlanRequest r = req;
      r.batch = batch;
      return make_plan(r, policy).tokens_per_s();
    };
    std::printf("%-14s %10lld %12.1f %10lld %12.1f %+8lld\n", model, static_cast<long long>(mb), tps("megatrain", mb),
                static_cast<long long>(lb), tps("milp", lb), static_cast<long long>(lb - mb));
    std::fflush(stdout);
  }
  return 0;
}
