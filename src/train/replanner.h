// Re-planning during a run (issue 13, part 2): the pieces the trainer uses to notice that
// the machine is not the one the plan was solved for, and to solve again.
//
//  - StepMeasures: what one step measured, in the units of the plan's profile: per-layer
//    compute seconds (forward, backward without its recompute, head; MeasuredLayerTimes'
//    meaning) from the executor's compute events less the copy waits traced inside them,
//    and each link's effective rate in bytes/s.
//    h2d and d2h: bytes over the seconds the backend's copies took (Backend::link_busy;
//    queueing not counted), so the rate is the link's own. NVMe: bytes over the union of the
//    requests' spans from issue to retire; the executor retires a request when it needs it,
//    so that span can exceed the transfer and the rate is a lower bound (see DriftDetector).
//  - assumed_measures(plan): the same numbers as the plan assumed them (its windows'
//    compute_s, its profile's rates), the detector's first reference.
//  - DriftDetector: a measure drifts when it is off its reference by more than `threshold`
//    (relative) in the same direction for `steps` consecutive steps; then it reports the
//    measures and their medians over those steps. One noisy step, or a measure that swings
//    from one side to the other, never triggers.
//  - predict_on(plan, measures): the plan's step time on the measured machine (compute_s
//    rebuilt from the measured layer times, links at the measured rates), so the current
//    plan and a new one are compared on the same profile.
//  - BackgroundSolve: the MILP re-solved on a std::thread at the lowest CPU priority (the
//    run goes on meanwhile and keeps the cores it needs); its
//    result says whether to switch: only to a feasible plan for the same model, batch,
//    sequence and paged optimizer-state layers whose predicted step beats the current
//    plan's re-predicted one by `margin` (so two near-equal plans never alternate).
#pragma once

#include <array>
#include <atomic>
#include <deque>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "exec/streaming_executor.h"
#include "plan/plan.h"
#include "plan/plan_request.h"

namespace lt {

enum Measure { kForwardS, kBackwardS, kHeadS, kH2dBw, kD2hBw, kNvmeReadBw, kNvmeWriteBw, kMeasures };
const char* measure_name(int m);  // "forward compute", ..., "nvme write"
bool is_rate(int m);              // a link rate (bytes/s; lower is slower), else seconds

struct StepMeasures {
  std::array<double, kMeasures> v{};  // 0: not measured (nothing of that kind ran)
  double step_s = 0;                  // the step's wall time (measured) or prediction (assumed)
};

// A link's use over one step: bytes moved and the seconds its copies took.
struct LinkUse {
  double bytes = 0, busy_s = 0;
};

StepMeasures assumed_measures(const Plan& plan);
StepMeasures measure_step(const Plan& plan, const StreamingStepResult& r, LinkUse h2d, LinkUse d2h);

// The measured layer times (0 where not measured) and the profile with the measured rates.
MeasuredLayerTimes layer_times(const StepMeasures& m);
HardwareProfile with_rates(HardwareProfile hw, const StepMeasures& m);
// `plan` on the machine `m` describes (unmeasured entries keep the plan's own numbers).
double predict_on(const Plan& plan, const StepMeasures& m);
// What `plan` pages: its paged layers' states, masters, gradients and bf16 copies.
PlanRequest::PagedLayers paged_layers_of(const Plan& plan);
// The request that would make `plan` again (for a plan read from a file): its model,
// shape, budgets, profile, layer times, and what it pages, kept (PlanRequest::keep_paged).
PlanRequest request_of(const Plan& plan, double time_limit_s);

struct DriftedMeasure {
  int measure = 0;
  double assumed = 0, measured = 0;
  double drift() const { return assumed > 0 ? measured / assumed - 1 : 0; }
};

struct Drift {
  std::vector<DriftedMeasure> measures;
  StepMeasures measured;  // the reference with the measured medians put in
  std::string describe() const;  // "h2d 1.00 -> 0.25 GB/s (-75%), forward compute ..."
};

class DriftDetector {
 public:
  DriftDetector(const StepMeasures& reference, double threshold, int steps);
  // One step's measures. NVMe rates are lower bounds: a rate below the reference counts
  // only in a step that itself ran over the reference's step time by the threshold (a slow
  // NVMe the step does not feel is slack, or the bound's looseness). Returns the drift
  // once some measure has drifted `steps` steps in a row, and starts counting afresh.
  std::optional<Drift> observe(const StepMeasures& m);
  // A new reference (after a re-plan, switched or not), counting from zero.
  void rebase(const StepMeasures& reference);
  void reset();  // forget the steps counted so far
  // After a re-plan that kept the plan: `measure` fires no re-plan for the next `steps`
  // observed steps (the trainer doubles the hold for each kept re-plan in a row), so that
  // noise which keeps crossing the threshold does not keep a solver busy; the other
  // measures still fire. Survives rebase().
  void hold(int measure, int steps);
  const StepMeasures& reference() const { return ref_; }

 private:
  StepMeasures ref_;
  double threshold_;
  int steps_;
  std::array<int, kMeasures> run_{}, sign_{}, hold_{};
  std::array<std::deque<double>, kMeasures> recent_;
};

struct ReplanResult {
  Drift drift;
  bool adopt = false;           // switch to `plan` at the next step boundary
  Plan plan;                    // the new plan (when one was solved)
  double old_predicted_s = 0;   // the current plan, as it was planned
  double old_on_measured_s = 0; // the current plan on the measured profile
  double new_predicted_s = 0;   // the new plan on the measured profile (0: none)
  double solve_s = 0;
  std::string note;             // why the current plan stays (empty when adopted)
};

// Decides on a solved plan (what BackgroundSolve's thread does after make_plan): the
// result with adopt set, or a note saying why not.
ReplanResult judge_replan(const Plan& current, const Plan& solved, const Drift& drift, double margin);

class BackgroundSolve {
 public:
  BackgroundSolve() = default;
  ~BackgroundSolve();  // waits for a solve in flight (the MILP cannot be interrupted)
  BackgroundSolve(const BackgroundSolve&) = delete;
  BackgroundSolve& operator=(const BackgroundSolve&) = delete;

  // Solves `req` with `policy` on a new thread; a previous result must have been taken.
  void start(PlanRequest req, std::string policy, Plan current, Drift drift, double margin);
  bool busy() const { return thread_.joinable(); }
  // The result once the solve is done (joins the thread), else nothing.
  std::optional<ReplanResult> take();
  ReplanResult wait();  // blocks until the solve in flight is done (one must be)

 private:
  std::thread thread_;
  std::atomic<bool> done_{false};
  ReplanResult result_;  // written by the thread before done_, read after it
};

// What happened to a re-plan, for the trainer to print and log.
struct ReplanEvent {
  // started: the step after which the solve starts; outcome: the step before which it
  // was decided (the first step on the new plan when switched; the metrics record's step).
  int64_t step = 0;
  bool started = false;   // true: drift seen, the solve starts; false: the solve's outcome
  bool switched = false;  // the run now uses result.plan
  ReplanResult result;    // drift (both), predictions and note (outcome)
  std::string message() const;  // one line for the log
  nlohmann::json record() const;  // the metrics JSONL record (outcomes)
};

}  // namespace lt
