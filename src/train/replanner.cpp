#include "train/replanner.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/measure.h"
#include "model/config.h"
#include "plan/plan_evaluate.h"
#include "plan/planner.h"

namespace lt {
namespace {

bool kept(const Plan& p, int layer) {
  return std::find(p.keep_internals.begin(), p.keep_internals.end(), layer) != p.keep_internals.end();
}

// Seconds covered by at least one of the spans.
double union_seconds(std::vector<std::pair<double, double>> spans) {
  std::sort(spans.begin(), spans.end());
  double total = 0, start = 0, end = -1;
  for (auto [s, e] : spans) {
    if (s > end) {
      if (end > start) total += end - start;
      start = s;
      end = e;
    } else {
      end = std::max(end, e);
    }
  }
  if (end > start) total += end - start;
  return total;
}

bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

std::string format_measure(int m, double v) {
  char buf[48];
  if (is_rate(m)) std::snprintf(buf, sizeof buf, v >= 1e9 ? "%.2f GB/s" : "%.1f MB/s", v >= 1e9 ? v / 1e9 : v / 1e6);
  else std::snprintf(buf, sizeof buf, "%.3g ms", v * 1e3);
  return buf;
}

}  // namespace

const char* measure_name(int m) {
  static const char* const names[kMeasures] = {"forward compute", "backward compute", "head compute", "h2d",
                                               "d2h", "nvme read", "nvme write"};
  LT_ASSERT(m >= 0 && m < kMeasures, "no such measure");
  return names[m];
}

bool is_rate(int m) { return m >= kH2dBw; }

StepMeasures assumed_measures(const Plan& p) {
  StepMeasures a;
  double forward = -1, backward = -1, head = 0;
  bool has_head = false;
  for (const Window& w : p.windows) {
    if (w.kind == WindowKind::Forward && forward < 0) forward = w.compute_s;
    if (w.kind == WindowKind::Head) head += w.compute_s, has_head = true;
  }
  for (const Window& w : p.windows)
    if (w.kind == WindowKind::Backward && backward < 0)
      backward = w.compute_s - (kept(p, w.layer) ? 0 : std::max(0.0, forward));
  a.v[kForwardS] = std::max(0.0, forward);
  a.v[kBackwardS] = std::max(0.0, backward);
  a.v[kHeadS] = has_head ? head : 0;
  a.v[kH2dBw] = p.hardware.h2d_bw;
  a.v[kD2hBw] = p.hardware.d2h_bw;
  a.v[kNvmeReadBw] = p.hardware.nvme_read_bw;
  a.v[kNvmeWriteBw] = p.hardware.nvme_write_bw;
  a.step_s = p.predicted_step_s;
  return a;
}

StepMeasures measure_step(const Plan& p, const StreamingStepResult& r, LinkUse h2d, LinkUse d2h) {
  std::unordered_map<std::string, const Window*> by_name;
  for (const Window& w : p.windows) by_name[w.name] = &w;
  std::vector<double> forward;
  std::vector<std::pair<const Window*, double>> backward;
  double head = 0;
  bool has_head = false;
  std::vector<std::pair<double, double>> reads, writes;
  double read_bytes = 0, write_bytes = 0;
  for (size_t k = 0; k < r.events.size(); ++k) {
    const ExecEvent& e = r.events[k];
    if (e.lane == ExecLane::Nvme) {
      const bool read = ends_with(e.name, " read");
      (read ? reads : writes).push_back({e.start_s, e.end_s});
      (read ? read_bytes : write_bytes) += e.bytes;
      continue;
    }
    if (e.lane != ExecLane::Compute || e.name != e.window) continue;
    const auto it = by_name.find(e.name);
    if (it == by_name.end()) continue;
    const Window& w = *it->second;
    // The kernels' time: the compute event less the copy waits traced inside it (a
    // boundary's trip to the host blocks among the forward's kernels); the compute event
    // is recorded when it ends, after those.
    double d = e.end_s - e.start_s;
    for (size_t q = k; q-- > 0 && r.events[q].start_s >= e.start_s;)
      if (r.events[q].window == e.window && r.events[q].lane != ExecLane::Host)  // updates run beside the kernels
        d -= r.events[q].end_s - r.events[q].start_s;
    d = std::max(0.0, d);
    switch (w.kind) {
      case WindowKind::Forward:
      case WindowKind::Recompute: forward.push_back(d); break;
      case WindowKind::Backward: backward.push_back({&w, d}); break;
      case WindowKind::Head: head += d, has_head = true; break;
      default: break;
    }
  }
  StepMeasures m;
  m.step_s = r.step_s;
  const double f = forward.empty() ? 0 : median(forward);
  m.v[kForwardS] = f;
  std::vector<double> b;
  for (auto [w, d] : backward) b.push_back(std::max(0.0, d - (kept(p, w->layer) ? 0 : f)));
  m.v[kBackwardS] = b.empty() ? 0 : median(b);
  m.v[kHeadS] = has_head ? head : 0;
  if (h2d.bytes > 0 && h2d.busy_s > 0) m.v[kH2dBw] = h2d.bytes / h2d.busy_s;
  if (d2h.bytes > 0 && d2h.busy_s > 0) m.v[kD2hBw] = d2h.bytes / d2h.busy_s;
  if (const double s = union_seconds(reads); read_bytes > 0 && s > 0) m.v[kNvmeReadBw] = read_bytes / s;
  if (const double s = union_seconds(writes); write_bytes > 0 && s > 0) m.v[kNvmeWriteBw] = write_bytes / s;
  return m;
}

MeasuredLayerTimes layer_times(const StepMeasures& m) {
  return {m.v[kForwardS], m.v[kBackwardS], m.v[kHeadS]};
}

HardwareProfile with_rates(HardwareProfile hw, const StepMeasures& m) {
  if (m.v[kH2dBw] > 0) hw.h2d_bw = m.v[kH2dBw];
  if (m.v[kD2hBw] > 0) hw.d2h_bw = m.v[kD2hBw];
  if (m.v[kNvmeReadBw] > 0) hw.nvme_read_bw = m.v[kNvmeReadBw];
  if (m.v[kNvmeWriteBw] > 0) hw.nvme_write_bw = m.v[kNvmeWriteBw];
  for (const char* k : {"links.h2d_gbps", "links.d2h_gbps", "nvme.read_gbps", "nvme.write_gbps"})
    hw.sources[k] = "measured during the run";
  return hw;
}

double predict_on(const Plan& plan, const StepMeasures& m) {
  Plan p = plan;
  p.hardware = with_rates(p.hardware, m);
  const StepMeasures own = assumed_measures(plan);
  auto pick = [&](int i) { return m.v[i] > 0 ? m.v[i] : own.v[i]; };
  const double f = pick(kForwardS), b = pick(kBackwardS);
  // The head's windows keep their shares of the measured head time.
  const double head_scale = own.v[kHeadS] > 0 && m.v[kHeadS] > 0 ? m.v[kHeadS] / own.v[kHeadS] : 1;
  for (Window& w : p.windows) {
    switch (w.kind) {
      case WindowKind::Forward:
      case WindowKind::Recompute: w.compute_s = f; break;
      case WindowKind::Backward: w.compute_s = b + (kept(p, w.layer) ? 0 : f); break;
      case WindowKind::Head: w.compute_s *= head_scale; break;
      default: break;
    }
  }
  return predicted_step_seconds(p);
}

PlanRequest::PagedLayers paged_layers_of(const Plan& p) {
  return {p.nvme_state_layers, p.nvme_master_layers, p.nvme_grad_layers, p.nvme_copy_layers};
}

PlanRequest request_of(const Plan& p, double time_limit_s) {
  PlanRequest req;
  req.model_name = p.model_name;
  req.model = p.model;
  req.hardware = p.hardware;
  req.batch = p.batch;
  req.seq = p.seq;
  req.gpu_cap_bytes = p.gpu_cap_bytes;
  req.cpu_act_budget_bytes = p.cpu_act_budget_bytes;
  req.nvme_act_budget_bytes = p.nvme_act_budget_bytes;
  req.nvme_state_layers = static_cast<int>(p.nvme_state_layers.size());
  req.page_master = !p.nvme_master_layers.empty();
  req.page_grads = !p.nvme_grad_layers.empty();
  req.page_copy = !p.nvme_copy_layers.empty();
  req.keep_paged = paged_layers_of(p);
  req.measured = layer_times(assumed_measures(p));
  req.scratch = p.scratch;
  req.time_limit_s = time_limit_s;
  return req;
}

std::string Drift::describe() const {
  std::string s;
  for (const DriftedMeasure& d : measures) {
    char pct[32];
    std::snprintf(pct, sizeof pct, " (%+.0f%%)", 100 * d.drift());
    if (!s.empty()) s += ", ";
    s += std::string(measure_name(d.measure)) + " " + format_measure(d.measure, d.assumed) + " -> " +
         format_measure(d.measure, d.measured) + pct;
  }
  return s;
}

DriftDetector::DriftDetector(const StepMeasures& reference, double threshold, int steps)
    : ref_(reference), threshold_(threshold), steps_(steps) {
  LT_ASSERT(threshold > 0 && steps >= 1, "drift detector needs a positive threshold and at least one step");
}

void DriftDetector::rebase(const StepMeasures& reference) {
  ref_ = reference;
  reset();
}

void DriftDetector::reset() {
  run_.fill(0);
  sign_.fill(0);
  for (auto& r : recent_) r.clear();
}

void DriftDetector::hold(int measure, int steps) {
  LT_ASSERT(measure >= 0 && measure < kMeasures, "no such measure");
  hold_[measure] = std::max(hold_[measure], steps);
}

std::optional<Drift> DriftDetector::observe(const StepMeasures& m) {
  const bool step_late = ref_.step_s > 0 && m.step_s > ref_.step_s * (1 + threshold_);
  bool fire = false;
  for (int i = 0; i < kMeasures; ++i) {
    const bool held = hold_[i] > 0;
    if (held) --hold_[i];
    if (!(m.v[i] > 0) || !(ref_.v[i] > 0)) continue;  // not measured this step: the run goes on
    recent_[i].push_back(m.v[i]);
    if (static_cast<int>(recent_[i].size()) > steps_) recent_[i].pop_front();
    const double rel = m.v[i] / ref_.v[i] - 1;
    const int sign = rel > 0 ? 1 : -1;
    bool drifted = std::abs(rel) > threshold_;
    const bool nvme = i == kNvmeReadBw || i == kNvmeWriteBw;
    if (nvme && sign < 0 && !step_late) drifted = false;  // a lower bound below the plan: not evidence
    if (!drifted) {
      run_[i] = 0;
    } else {
      run_[i] = sign == sign_[i] ? run_[i] + 1 : 1;
      sign_[i] = sign;
    }
    fire = fire || (run_[i] >= steps_ && !held);
  }
  if (!fire) return std::nullopt;
  Drift d;
  d.measured = ref_;
  for (int i = 0; i < kMeasures; ++i) {
    if (recent_[i].empty()) continue;
    const double med = median(std::vector<double>(recent_[i].begin(), recent_[i].end()));
    const bool nvme = i == kNvmeReadBw || i == kNvmeWriteBw;
    // The measured medians replace the reference, except an NVMe bound that did not drift;
    // the drifted measures are those that fired and those whose median is off too.
    const bool off = std::abs(med / ref_.v[i] - 1) > threshold_;
    if (run_[i] >= steps_ || (off && !nvme)) d.measures.push_back({i, ref_.v[i], med});
    if (!nvme || run_[i] >= steps_) d.measured.v[i] = med;
  }
  d.measured.step_s = 0;
  reset();
  return d;
}

ReplanResult judge_replan(const Plan& current, const Plan& solved, const Drift& drift, double margin) {
  ReplanResult r;
  r.drift = drift;
  r.old_predicted_s = current.predicted_step_s;
  r.old_on_measured_s = predict_on(current, drift.measured);
  r.solve_s = solved.solve.solve_s;
  if (!solved.feasible) {
    r.note = "the re-plan is infeasible (" + solved.infeasible_reason + ")";
    return r;
  }
  r.new_predicted_s = solved.predicted_step_s;
  r.plan = solved;
  if (solved.batch != current.batch || solved.seq != current.seq ||
      model_config_to_json(solved.model) != model_config_to_json(current.model)) {
    r.note = "the re-plan is for another model or shape";
    return r;
  }
  if (solved.nvme_state_layers != current.nvme_state_layers ||
      solved.nvme_master_layers != current.nvme_master_layers ||
      solved.nvme_grad_layers != current.nvme_grad_layers || solved.nvme_copy_layers != current.nvme_copy_layers) {
    // The trainer set its host blocks and NVMe slots up for what pages (a paged layer's
    // gradients and bf16 copy have no host pages to come back to).
    r.note = "the re-plan pages other layers or parts to NVMe (switching keeps what pages)";
    return r;
  }
  if (!(solved.predicted_step_s < r.old_on_measured_s * (1 - margin))) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "the new plan is not %.0f%% faster than the current one on the measured profile",
                  100 * margin);
    r.note = buf;
    return r;
  }
  r.adopt = true;
  return r;
}

namespace {
ReplanResult failed(const Plan& current, const Drift& drift, std::string note) {
  ReplanResult r;
  r.drift = drift;
  r.old_predicted_s = current.predicted_step_s;
  r.note = std::move(note);
  return r;
}
}  // namespace

BackgroundSolve::~BackgroundSolve() {
  if (thread_.joinable()) thread_.join();
}

void BackgroundSolve::start(PlanRequest req, std::string policy, Plan current, Drift drift, double margin) {
  LT_ASSERT(!thread_.joinable(), "a re-plan started while another one runs");
  done_.store(false);
  thread_ = std::thread([this, req = std::move(req), policy = std::move(policy), current = std::move(current),
                         drift = std::move(drift), margin] {
    // The lowest CPU priority: the solve takes what training leaves of the cores and does
    // not slow its steps (a failure to lower it only costs speed).
    (void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
    ReplanResult r;
    try {
      r = judge_replan(current, make_plan(req, policy), drift, margin);
    } catch (const std::exception& e) {  // an lt::Error from the solver: the run goes on
      r = failed(current, drift, std::string("the re-plan failed: ") + e.what());
    } catch (...) {
      r = failed(current, drift, "the re-plan failed with an unknown exception");
    }
    result_ = std::move(r);
    done_.store(true);
  });
}

ReplanResult BackgroundSolve::wait() {
  LT_ASSERT(thread_.joinable(), "waiting for a re-plan that never started");
  thread_.join();
  return std::move(result_);
}

std::optional<ReplanResult> BackgroundSolve::take() {
  if (!thread_.joinable() || !done_.load()) return std::nullopt;
  thread_.join();
  return std::move(result_);
}

namespace {

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f s", s);
  return buf;
}

}  // namespace

std::string ReplanEvent::message() const {
  const ReplanResult& r = result;
  std::string m = (started ? "after step " : "before step ") + std::to_string(step) + ": re-plan: ";
  if (started)
    return m + r.drift.describe() + "; solving the MILP again with the measured profile in the background (the " +
           "current plan: planned " + seconds_text(r.old_predicted_s) + ", " + seconds_text(r.old_on_measured_s) +
           " on the measured profile)";
  const std::string preds = "new plan " + (r.new_predicted_s > 0 ? seconds_text(r.new_predicted_s) : std::string("none")) +
                            ", current plan " + seconds_text(r.old_on_measured_s) + " on the measured profile (planned " +
                            seconds_text(r.old_predicted_s) + ")";
  if (switched) {
    const Plan::TierCounts tc = r.plan.tier_counts();
    char buf[160];
    std::snprintf(buf, sizeof buf, "; solved in %.2f s; boundaries gpu %.1f cpu %.1f nvme %.1f recomputed %.0f",
                  r.solve_s, tc.gpu, tc.cpu, tc.nvme, tc.recompute);
    return m + "switched to the new plan (" + r.drift.describe() + "): " + preds + buf;
  }
  return m + "kept the current plan: " + r.note + " (" + r.drift.describe() + "; " + preds + ")";
}

nlohmann::json ReplanEvent::record() const {
  const ReplanResult& r = result;
  nlohmann::json drift = nlohmann::json::array();
  for (const DriftedMeasure& d : r.drift.measures)
    drift.push_back({{"measure", measure_name(d.measure)},
                     {"unit", is_rate(d.measure) ? "bytes/s" : "s"},
                     {"assumed", d.assumed},
                     {"measured", d.measured},
                     {"drift", d.drift()}});
  nlohmann::json j = {{"step", step},
                      {"record", "replan"},
                      {"switched", switched},
                      {"why", r.drift.describe()},
                      {"drift", drift},
                      {"old_predicted_s", r.old_predicted_s},
                      {"old_on_measured_s", r.old_on_measured_s},
                      {"new_predicted_s", r.new_predicted_s},
                      {"solve_s", r.solve_s}};
  if (!r.note.empty()) j["note"] = r.note;
  if (switched) {
    const Plan::TierCounts tc = r.plan.tier_counts();
    j["plan"] = {{"gpu", tc.gpu}, {"cpu", tc.cpu}, {"nvme", tc.nvme}, {"recomputed", tc.recompute}};
  }
  return j;
}

}  // namespace lt
