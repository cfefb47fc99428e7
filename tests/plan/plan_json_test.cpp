#include "plan/plan_json.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "plan/plan_evaluate.h"
#include "plan/planner.h"
#include "plan_test_util.h"
#include "test_util.h"

namespace lt {
namespace {

TEST(PlanJson, RoundTrip) {
  PlanRequest req = test::tiny_request(6, "h800", 8);
  req.gpu_cap_bytes = 1.0e9;  // tight enough that tiers and transfers appear
  Plan p = make_plan(req, "milp");
  ASSERT_TRUE(p.feasible) << p.infeasible_reason;
  test::TempDir dir("plan_json");
  std::string path = dir.str() + "/plan.json";
  save_plan(p, path);
  Plan q = load_plan(path);
  EXPECT_EQ(q.policy, "milp");
  EXPECT_EQ(q.windows.size(), p.windows.size());
  EXPECT_EQ(q.blocks, p.blocks);
  EXPECT_EQ(q.resident_layers, p.resident_layers);
  EXPECT_EQ(q.model.hidden_size, p.model.hidden_size);
  EXPECT_NEAR(predicted_step_seconds(q), p.predicted_step_s, 1e-12 * p.predicted_step_s);
  EXPECT_EQ(plan_to_json(q).dump(), plan_to_json(p).dump());
  nlohmann::json s = plan_summary_json(p);
  for (const char* k : {"feasible", "policy", "batch", "seq", "predicted_step_s", "tokens_per_s", "tflops", "solve_s",
                        "mip_gap", "boundaries", "peak_bytes"})
    EXPECT_TRUE(s.contains(k)) << k;
  for (const char* k : {"gpu", "cpu", "nvme", "recompute"}) EXPECT_TRUE(s["boundaries"].contains(k)) << k;
  for (const char* k : {"gpu", "cpu", "nvme"}) EXPECT_TRUE(s["peak_bytes"].contains(k)) << k;
}

TEST(PlanJson, RejectsForeignJson) {
  EXPECT_THROW(plan_from_json(nlohmann::json{{"format", "other"}}, "test"), Error);
  EXPECT_THROW(plan_from_json(nlohmann::json{{"format", "lazytrain-plan"}, {"version", 1}}, "test"), Error);
}

// A plan file is user input: what the validator, the simulator and the executor index by
// must be checked when it is read. Each case edits a real plan; found by
// fuzz/plan_json_fuzz (and its seeds' neighbours).
TEST(PlanJson, RejectsOutOfRangeFieldsWithAnLtError) {
  PlanRequest req = test::tiny_request(2, "h800", 2, 32);
  const Plan p = make_plan(req, "greedy");
  ASSERT_TRUE(p.feasible) << p.infeasible_reason;
  const nlohmann::json good = plan_to_json(p);
  auto expect_error = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& part) {
    nlohmann::json j = good;
    edit(j);
    try {
      (void)plan_from_json(j, "edited.json");
      ADD_FAILURE() << "no error; wanted: " << part;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(part), std::string::npos) << msg;
      EXPECT_NE(msg.find("(in edited.json"), std::string::npos) << msg;
    }
  };
  // get<int>() of 1e30 was undefined behaviour (UBSan: outside the range of int).
  expect_error([](nlohmann::json& j) { j["model"]["num_layers"] = 1e30; }, "model.num_layers must be an integer");
  expect_error([](nlohmann::json& j) { j["windows"][0]["layer"] = 4294967296.0; }, "windows.layer must be an integer");
  expect_error([](nlohmann::json& j) { j["windows"][0]["layer"] = 4294967296; }, "out of range");
  // validate_plan indexed its per-layer tables with these (heap-buffer-overflow).
  expect_error([](nlohmann::json& j) { j["resident_layers"] = {-5, 99}; }, "layer -5 is not one of the plan's 0..1");
  expect_error([](nlohmann::json& j) { j["windows"][2]["layer"] = 1000; }, "layer 1000 in window");
  expect_error([](nlohmann::json& j) { j["recompute_blocks"] = {{0, 7}}; }, "recompute block [0, 7]");
  // The simulator indexed the boundaries with a backward window's layer -1 (UBSan: pointer
  // overflow in sim/simulator.cpp; fuzz/plan_json_fuzz in CI, stop 51).
  auto window_of_kind = [&](const std::string& kind) {
    for (size_t i = 0; i < good["windows"].size(); ++i)
      if (good["windows"][i]["kind"] == kind) return i;
    ADD_FAILURE() << "the plan has no " << kind << " window";
    return size_t{0};
  };
  const size_t backward = window_of_kind("backward"), forward = window_of_kind("forward");
  const size_t head = window_of_kind("head");
  expect_error([&](nlohmann::json& j) { j["windows"][backward]["layer"] = -1; }, "backward window B");
  expect_error([&](nlohmann::json& j) { j["windows"][forward]["layer"] = -1; }, "names no layer (0..1)");
  expect_error([&](nlohmann::json& j) { j["windows"][head]["layer"] = 0; }, "head window HEAD names layer 0");
  // The simulator's std::stoi of a tensor name threw std::invalid_argument, or indexed past
  // its tables with "w.999".
  expect_error([](nlohmann::json& j) { j["windows"][1]["transfers"][0]["tensor"] = "w.x"; }, "unknown tensor 'w.x'");
  expect_error([](nlohmann::json& j) { j["windows"][1]["transfers"][0]["tensor"] = "w.999"; }, "unknown tensor 'w.999'");
  expect_error([](nlohmann::json& j) { j["optimizer"]["placement"][0]["window"] = 500; }, "names window 500");
  // "version": "1" and "format": 3 threw nlohmann's type_error from json::value().
  expect_error([](nlohmann::json& j) { j["version"] = "1"; }, "unsupported plan version");
  expect_error([](nlohmann::json& j) { j["format"] = 3; }, "not a lazytrain plan");
  expect_error([](nlohmann::json& j) { j["hardware"]["act_bytes"] = 1e30; }, "act_bytes must be 2 (bf16) or 4");
  // And the unedited plan still reads back.
  EXPECT_EQ(plan_to_json(plan_from_json(good, "good.json")), good);
}

}  // namespace
}  // namespace lt
