// A plan read from a file (`lazytrain train --plan`, `lazytrain simulate`) is checked
// against plan_validate.h's rules before anything runs it: a hand-edited or stale
// plan.json is refused, naming the file, what is wrong, and to re-run `lazytrain plan`.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/checkpoint.h"
#include "plan/plan_json.h"
#include "plan/plan_validate.h"
#include "plan/planner.h"
#include "train/trainer.h"
#include "../exec/streaming_test_util.h"
#include "test_util.h"
#include "train_test_util.h"

namespace lt {
namespace {

TrainConfig tiny_run(const std::string& out) {
  TrainConfig c = test::tiny_config(out);
  c.steps = 1;
  c.warmup_steps = 0;
  c.synthetic_train_problems = 50;
  c.precision = "f32";  // what the streaming executor computes in
  return c;
}

// Output and exit status of a shell command.
std::pair<std::string, int> run_command(const std::string& cmd) {
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return {"popen failed", -1};
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  const int status = pclose(f);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

class PlanFileValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    // The model a scratch run of tiny_run builds, as its checkpoint records it.
    const TrainSummary ref = run_training(tiny_run(ref_dir_.str()));
    PlanRequest req;
    req.model_name = "plan-file-validation-test";
    req.model = load_model_config(ref.checkpoint_dir);
    req.hardware = test::streaming_cpu_profile();
    req.hardware.act_bytes = 4;
    req.batch = tiny_run("").batch;
    req.seq = tiny_run("").seq_len;
    const Plan p = make_plan(req, "keep-all");
    ASSERT_TRUE(p.feasible) << p.infeasible_reason;
    ASSERT_TRUE(validate_plan(p).empty()) << validate_plan(p).front();
    good_ = plan_dir_.str() + "/plan.json";
    save_plan(p, good_);
    // A hand edit: the frees dropped from every window, so the step ends holding memory.
    nlohmann::json j = nlohmann::json::parse(test::read_file(good_));
    for (auto& w : j.at("windows")) w["free"] = nlohmann::json::array();
    bad_ = plan_dir_.str() + "/edited-plan.json";
    std::ofstream(bad_) << j.dump(1);
  }
  static void expect_refusal_message(const std::string& m, const std::string& path) {
    EXPECT_NE(m.find("the plan is not valid"), std::string::npos) << m;
    EXPECT_NE(m.find("not all freed"), std::string::npos) << m;
    EXPECT_NE(m.find("plan file " + path), std::string::npos) << m;
    EXPECT_NE(m.find("re-run `lazytrain plan"), std::string::npos) << m;
  }
  test::TempDir ref_dir_{"plan-file-ref"}, plan_dir_{"plan-file-plans"};
  std::string good_, bad_;
};

TEST_F(PlanFileValidation, TrainRefusesAnEditedPlanAndRunsTheOriginal) {
  test::TempDir out("plan-file-train");
  TrainConfig c = tiny_run(out.str());
  c.plan = bad_;
  expect_refusal_message(test::error_of([&] { run_training(c); }), bad_);
  c.plan = good_;
  EXPECT_EQ(run_training(c).steps, 1);
}

TEST_F(PlanFileValidation, SimulateRefusesAnEditedPlanAndRunsTheOriginal) {
  const std::string bin = std::string(LT_BINARY_DIR) + "/lazytrain";
  ASSERT_TRUE(std::filesystem::exists(bin)) << "build the lazytrain binary";
  const auto [bad_out, bad_status] = run_command("'" + bin + "' simulate '" + bad_ + "'");
  EXPECT_EQ(bad_status, 1) << bad_out;
  expect_refusal_message(bad_out, bad_);
  const auto [good_out, good_status] = run_command("'" + bin + "' simulate '" + good_ + "'");
  EXPECT_EQ(good_status, 0) << good_out;
}

}  // namespace
}  // namespace lt
