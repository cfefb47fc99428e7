// Fuzz target: a plan JSON from `lazytrain plan --out` (plan/plan_json.h, load_plan), as
// `lazytrain train --plan` and `lazytrain simulate --plan` read it.
//
// Input: the file's bytes. On success the harness validates the plan (plan/plan_validate.h),
// writes it back (plan_to_json, which must read back to the same JSON) and summarises it;
// a plan that validates is also replayed by the simulator (sim/simulator.h).
// Finding: any crash, ASan/UBSan report, leak, hang, LT_ASSERT, an exception other than
// lt::Error (fuzz_util.h), or a plan whose JSON does not read back to itself.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "plan/plan_json.h"
#include "plan/plan_validate.h"
#include "sim/simulator.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = lt::fuzz::scratch().write("plan.json", data, size);
  lt::fuzz::expect_only_lt_error([&] {
    const lt::Plan p = lt::load_plan(path);
    const std::vector<std::string> problems = lt::validate_plan(p);
    (void)lt::capacity_problems(p);
    const nlohmann::json back = lt::plan_to_json(p);
    const lt::Plan again = lt::plan_from_json(back, "plan written back");
    if (lt::plan_to_json(again) != back) lt::fuzz::finding("plan JSON written back reads back different");
    (void)lt::plan_summary_json(p).dump();
    if (problems.empty()) (void)lt::simulate_plan(p);
  });
  return 0;
}
