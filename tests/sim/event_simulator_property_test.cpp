// Every preset (presets/*.json), profile (profiles/*.json) and policy at two batch sizes:
// the event-driven step (sim/event_simulator.h) against the plan's predicted_step_s, and
// the invariants that hold between it and the window replay (sim/simulator.h).
//
// What holds for every plan:
//  - the window replay is the prediction (1e-9 relative: the same sums in another order);
//  - neither simulation finds a violation;
//  - both simulate the same events in the same order, and none issued before HEAD ends
//    later without the barriers: every dependency of the event-driven schedule there is
//    one the window replay honours too (the barrier implies the slot waits), the lanes
//    keep the same FIFO order and the durations are the same, so each start is a max
//    over fewer, earlier ends;
//  - in HEAD the window rule overlaps what cannot overlap, so there the event-driven
//    schedule may be later: the head's compute by at most head_compute_slack (below:
//    megatrain-code computes the head only once its weights, loaded in HEAD, are in; a
//    streamed head's two passes are pipelines over two chunk buffers each), and every
//    event after HEAD by no more than HEAD's latest event; so does the step;
//  - the step is no shorter than any lane's busy time (a lower bound the simulation does
//    not compute), and the compute lane is busy for exactly the plan's compute seconds.
// The step is within 5% of predicted_step_s, except for these reasons, asserted below:
//  - megatrain-code's LD windows (shorter). They stand for MegaTrain's code, which loads
//    each backward layer's weights with no look-ahead: the window rule charges each load
//    in full (nothing computes in an LD window), while the event-driven engine, with two
//    weight slots and no barrier, runs it under the compute before it. Moving every LD
//    load into the compute window before it (a prefetch; the gradient drain it carries
//    into the window after) must leave the event schedule unchanged and bring the window
//    rule within 5% of it;
//  - a streamed head's pipeline (longer), by no more than head_compute_slack.
// The compute-tier peak is within the plan's, except where, without the barriers, the
// head gradient (g.head, whose slot the plan frees one window after HEAD) is still
// draining while the computes after HEAD run, or weight loads (whose slots the plan
// counts from the window that issues them, as the executor holds them) run under the
// window before: then the peak less those is within the plan's. Likewise the host peak,
// except where NVMe reads of offloaded boundaries (which the plan stages from the window
// that issues them) run ahead under the windows before, as soon as the NVMe queue is free:
// then the peak less those staged bytes is within the plan's (seen first with
// mixtral-8x7b on the rtx3090 at batch 16, where ten boundaries' reads land at once).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../plan/plan_test_util.h"
#include "plan/planner.h"
#include "sim/event_simulator.h"
#include "sim/simulator.h"

namespace lt {
namespace {

std::vector<std::string> json_stems(const char* dir) {
  std::vector<std::string> v;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(LT_SOURCE_DIR) / dir))
    if (e.path().extension() == ".json") v.push_back(e.path().stem().string());
  std::sort(v.begin(), v.end());
  return v;
}

// Each lane's busy time, summed from the plan's windows and the profile.
double longest_lane(const Plan& p) {
  const HardwareProfile& hw = p.hardware;
  double compute = 0, h2d = 0, d2h = 0, nvme = 0, host = 0;
  for (const Window& w : p.windows) {
    compute += w.compute_s;
    for (const Transfer& t : w.transfers) {
      if (t.link == Link::H2D) h2d += t.bytes / hw.h2d_bw;
      else if (t.link == Link::D2H) d2h += t.bytes / hw.d2h_bw;
      else nvme += t.bytes / (t.link == Link::NvmeRead ? hw.nvme_read_bw : hw.nvme_write_bw);
    }
    for (const HostTask& h : w.host) host += h.seconds;
  }
  return std::max({compute, h2d, d2h, nvme, host});
}

double plan_compute_s(const Plan& p) {
  double s = 0;
  for (const Window& w : p.windows) s += w.compute_s;
  return s;
}

// megatrain-code with its LD windows folded into their neighbours: each weight load into
// the compute window before it, the other transfers (the previous layer's gradient) and
// the frees into the window after it, in order, so every lane keeps its FIFO order.
Plan loads_prefetched(const Plan& p) {
  Plan q = p;
  q.windows.clear();
  std::vector<Transfer> carried;
  std::vector<MemOp> carried_free;
  for (const Window& w : p.windows) {
    if (w.kind != WindowKind::Load) {
      Window x = w;
      x.transfers.insert(x.transfers.begin(), carried.begin(), carried.end());
      x.free.insert(x.free.end(), carried_free.begin(), carried_free.end());
      carried.clear();
      carried_free.clear();
      q.windows.push_back(std::move(x));
      continue;
    }
    for (const Transfer& t : w.transfers)
      (t.link == Link::H2D ? q.windows.back().transfers : carried).push_back(t);
    carried_free.insert(carried_free.end(), w.free.begin(), w.free.end());
  }
  return q;
}

// How much later than the window replay's HEAD the head's compute may end without
// barriers: the window rule overlaps in HEAD what the head's own data order serializes.
//  - A head whose weights load in HEAD itself (megatrain-code) computes once they are in:
//    up to that load's time.
//  - A streamed head runs its forward pass, then its backward pass, each a pipeline over
//    two chunk buffers, so each pass lasts at least the longer of its loads and its
//    compute, while the rule gives the whole window the longest of all loads, all compute
//    and all drains (the backward pass's loads under the forward pass's compute); plus a
//    chunk's load and a backward chunk's compute to fill and drain the pipelines. The
//    forward pass is a quarter of the compute (plan/cost_model.h's four head-forwards:
//    the logits once forward, again with the two gradients backward); its loads are
//    HEAD's first n-1 chunk loads.
double head_compute_slack(const Plan& p) {
  const HardwareProfile& hw = p.hardware;
  const Window* head = nullptr;
  for (const Window& w : p.windows)
    if (w.kind == WindowKind::Head) head = &w;
  if (!head) return 0;
  if (!p.head_streamed()) {
    double load = 0;
    for (const Transfer& t : head->transfers)
      if (t.tensor == "w.head") load += t.bytes / hw.h2d_bw;
    return load;
  }
  const int64_t n = p.head_chunks();
  double forward_loads = 0, backward_loads = 0, largest_load = 0;
  int64_t k = 0;
  for (const Transfer& t : head->transfers) {
    if (t.link != Link::H2D || t.tensor.rfind("w.head.", 0) != 0) continue;
    const double s = t.bytes / hw.h2d_bw;
    (k++ < n - 1 ? forward_loads : backward_loads) += s;
    largest_load = std::max(largest_load, s);
  }
  double drains = 0;
  for (const Transfer& t : head->transfers)
    if (t.link == Link::D2H) drains += t.bytes / hw.d2h_bw;
  const double forward = 0.25 * head->compute_s, backward = 0.75 * head->compute_s;
  const double rows = static_cast<double>(p.head_chunk_rows) / static_cast<double>(p.model.vocab_size);
  const double passes = std::max(forward_loads, forward) + std::max(backward_loads, backward);
  const double window = std::max({forward + backward, forward_loads + backward_loads, drains});
  return std::max(0.0, passes - window) + largest_load + backward * rows;
}

// The compute-tier bytes live at t, by brute force over the spans.
double live_at(const EventSimResult& r, const Plan& p, double t) {
  double live = p.fixed_gpu_bytes;
  for (const LiveSpan& s : r.gpu_spans)
    if (s.from <= t && t < s.to) live += s.bytes;
  return live;
}

// Weight slots live at t whose load started before the compute of the window ahead of
// the one that issues it ended. Without the barriers a load waits only for its slot (two
// in turn), so past a resident layer, which loads nothing for its backward, it may run
// under the window before its own, where the plan does not count it.
// Whether event e of window `window` starts before the compute of the window before it
// ends: no window barrier held it back (it runs ahead of where the plan puts it).
bool runs_ahead(const EventSimResult& ev, const Plan& p, const std::string& window, double start) {
  size_t w = 0;
  while (w < p.windows.size() && p.windows[w].name != window) ++w;
  if (w == 0 || w == p.windows.size()) return false;
  for (const SimEvent& c : ev.events)
    if (c.lane == SimLane::Compute && c.window == p.windows[w - 1].name && start < c.end) return true;
  return false;
}

// Host bytes live at t that NVMe reads staged ahead of their windows: the event-driven
// simulation issues a read as soon as the NVMe queue is free, and, like a compute that
// never waits for room (sim/event_simulator.h), a read never waits for host room.
double nvme_reads_ahead(const EventSimResult& ev, const Plan& p, double t) {
  double ahead = 0;
  for (const LiveSpan& s : ev.host_spans) {
    if (!(s.from <= t && t < s.to) || s.tensor.size() < 5 || s.tensor.compare(s.tensor.size() - 5, 5, ".nvme") != 0)
      continue;
    for (const SimEvent& read : ev.events)
      if (read.lane == SimLane::Nvme && read.name == s.tensor && read.start == s.from) {
        // A read, not the write's staging (whose span starts at the d2h).
        if (runs_ahead(ev, p, read.window, read.start)) ahead += s.bytes;
        break;
      }
  }
  return ahead;
}

// When the host holds the most: Plan::host_state_bytes plus the pieces live then.
double host_peak_time(const EventSimResult& ev, const Plan& p) {
  std::vector<std::pair<double, double>> d;
  for (const LiveSpan& s : ev.host_spans)
    if (s.to > s.from && s.bytes != 0) d.emplace_back(s.from, s.bytes), d.emplace_back(s.to, -s.bytes);
  std::sort(d.begin(), d.end());
  double cur = p.host_state_bytes, peak = cur, at = 0;
  for (auto [t, v] : d)
    if ((cur += v) > peak) peak = cur, at = t;
  return at;
}

double weight_slots_ahead(const EventSimResult& ev, const Plan& p, double t) {
  double ahead = 0;
  for (const LiveSpan& s : ev.gpu_spans) {
    // A layer's slot for its forward, recompute or backward (w.<j>, wr.<j>, wb.<j>), which
    // the load of w.<j> fills.
    const size_t dot = s.tensor.find('.');
    const std::string kind = s.tensor.substr(0, dot);
    if (!(s.from <= t && t < s.to) || (kind != "w" && kind != "wr" && kind != "wb") || dot + 1 >= s.tensor.size() ||
        !std::isdigit(static_cast<unsigned char>(s.tensor[dot + 1])))
      continue;
    for (const SimEvent& load : ev.events) {
      if (load.lane != SimLane::H2D || load.name != "w" + s.tensor.substr(dot) || load.start != s.from) continue;
      size_t w = 0;
      while (w < p.windows.size() && p.windows[w].name != load.window) ++w;
      if (w == 0 || w == p.windows.size()) continue;
      for (const SimEvent& c : ev.events)
        if (c.lane == SimLane::Compute && c.window == p.windows[w - 1].name && load.start < c.end) {
          ahead += s.bytes;
          break;
        }
      break;
    }
  }
  return ahead;
}

TEST(EventSimulatorProperty, EveryPresetProfileAndPolicy) {
  const char* policies[] = {"milp", "megatrain", "megatrain-code", "keep-all", "recompute-all", "greedy"};
  int plans = 0, outside = 0, over_peak = 0, streamed = 0;
  double max_head_late = 0;
  std::string latest_head;
  double largest_gap = 0;
  std::string largest;
  std::printf("%-8s %-14s %5s %-15s %10s %10s %8s %10s %8s\n", "profile", "preset", "batch", "policy", "predicted",
              "events", "diff", "windows", "peak/pl");
  for (const std::string& profile : json_stems("profiles"))
    for (const std::string& model : json_stems("presets"))
      for (int64_t batch : {2, 16}) {
        PlanRequest req = test::preset_request(model, profile, batch);
        req.time_limit_s = 0.5;  // consistency, not optimality, is checked here
        req.target_gap = 0.02;
        for (const char* policy : policies) {
          const Plan p = make_plan(req, policy);
          if (p.windows.empty()) continue;  // the MILP found no plan: nothing to simulate
          const std::string what = profile + " " + model + " batch " + std::to_string(batch) + " " + policy;
          ++plans;
          const EventSimResult ev = simulate_events(p);
          const SimResult win = simulate_plan(p);
          const double pred = p.predicted_step_s, diff = (ev.step_s - pred) / pred;
          std::printf("%-8s %-14s %5lld %-15s %10.4f %10.4f %+7.2f%% %10.4f %8.3f%s%s\n", profile.c_str(), model.c_str(),
                      static_cast<long long>(batch), policy, pred, ev.step_s, 100 * diff, win.step_s,
                      ev.peak.gpu / p.predicted_peak.gpu, p.feasible ? "" : "  (over its budgets)",
                      p.head_streamed() ? "  (streamed head)" : "");
          if (-diff > largest_gap) {
            largest_gap = -diff;
            largest = what;
          }

          EXPECT_NEAR(win.step_s, pred, 1e-9 * pred) << what;
          EXPECT_TRUE(win.violations.empty()) << what << ": " << win.violations.front();
          EXPECT_TRUE(ev.violations.empty()) << what << ": " << ev.violations.front();
          // The same events in the same order (a streamed head's compute is one event in the
          // window replay, one per chunk and pass here). None issued before HEAD ends later
          // without the barriers; the head's compute ends later by at most what the window
          // rule overlaps there that cannot overlap, and everything after HEAD by no more
          // than HEAD's latest event.
          std::vector<const SimEvent*> evs, wins;
          double ev_head = 0, win_head = 0;  // the head's compute ends; the window replay's HEAD ends
          for (const SimEvent& e : ev.events)
            if (e.lane == SimLane::Compute && e.window == "HEAD") ev_head = std::max(ev_head, e.end);
            else evs.push_back(&e);
          for (const SimEvent& e : win.events) {
            if (e.window == "HEAD") win_head = std::max(win_head, e.end);
            if (!(e.lane == SimLane::Compute && e.window == "HEAD")) wins.push_back(&e);
          }
          ASSERT_EQ(evs.size(), wins.size()) << what;
          const double tol = 1e-9 * pred;
          const double head_compute_late = ev_head - win_head;
          EXPECT_LE(head_compute_late, head_compute_slack(p) + tol) << what;
          // HEAD's own events are as late as the head's data order makes them (a streamed
          // head's gradient rows drain after their chunk; the window replay starts them with
          // the window); what comes after is no later than the latest of them.
          double head_late = std::max(0.0, head_compute_late);
          for (size_t i = 0; i < evs.size(); ++i)
            if (evs[i]->window == "HEAD") head_late = std::max(head_late, evs[i]->end - wins[i]->end);
          bool past_head = false;
          int later = 0;
          for (size_t i = 0; i < evs.size(); ++i) {
            ASSERT_EQ(evs[i]->name, wins[i]->name) << what << " event " << i;
            ASSERT_EQ(evs[i]->lane, wins[i]->lane) << what << " event " << i;
            past_head = past_head || evs[i]->window == "HEAD";
            if (evs[i]->window == "HEAD") continue;
            const double allowed = wins[i]->end + (past_head ? head_late : 0);
            if (evs[i]->end > allowed + tol && later++ < 3)
              ADD_FAILURE() << what << ": " << evs[i]->name << " in " << evs[i]->window << " ends at " << evs[i]->end
                            << " without barriers, " << wins[i]->end << " with them (HEAD up to " << head_late
                            << " s later)";
          }
          EXPECT_LE(ev.step_s, win.step_s + head_late + tol) << what;
          if (p.head_streamed()) ++streamed;
          if (head_late / pred > max_head_late) {
            max_head_late = head_late / pred;
            latest_head = what;
          }
          EXPECT_GE(ev.step_s, longest_lane(p) - tol) << what;
          EXPECT_NEAR(ev.compute_busy_s, plan_compute_s(p), tol) << what;
          EXPECT_LE(ev.exposed_comm_s + ev.exposed_host_s, ev.compute_idle_s + tol) << what;

          if (diff > 0.05) {  // only a streamed head's pipeline makes the event-driven step longer
            ++outside;
            EXPECT_TRUE(p.head_streamed()) << what << ": the event-driven step is " << 100 * diff << "% over the prediction";
            EXPECT_LE(ev.step_s - pred, head_compute_slack(p) + tol) << what;
          } else if (diff < -0.05) {
            ++outside;
            ASSERT_EQ(std::string(policy), "megatrain-code")
                << what << ": the event-driven step is " << 100 * diff << "% off the prediction";
            const Plan q = loads_prefetched(p);
            const EventSimResult evq = simulate_events(q);
            const SimResult winq = simulate_plan(q);
            EXPECT_TRUE(evq.violations.empty() && winq.violations.empty()) << what;
            EXPECT_NEAR(evq.step_s, ev.step_s, tol) << what << ": moving the loads changed the event schedule";
            EXPECT_LE(std::fabs(ev.step_s - winq.step_s), 0.05 * winq.step_s)
                << what << ": with the LD loads prefetched the window rule gives " << winq.step_s;
          }

          if (ev.peak.gpu > p.predicted_peak.gpu * (1 + 1e-6)) {
            ++over_peak;
            double t_peak = 0;
            for (auto [t, b] : ev.gpu_memory)
              if (b >= ev.peak.gpu) {
                t_peak = t;
                break;
              }
            double head_grad = 0;
            for (const LiveSpan& s : ev.gpu_spans)
              if ((s.tensor == "g.head" || s.tensor == "g.norm" || s.tensor.rfind("g.lm_head", 0) == 0) &&
                  s.from <= t_peak && t_peak < s.to)
                head_grad += s.bytes;
            EXPECT_NEAR(live_at(ev, p, t_peak), ev.peak.gpu, 1e-9 * ev.peak.gpu) << what;
            const double ahead = weight_slots_ahead(ev, p, t_peak);
            EXPECT_GT(head_grad + ahead, 0) << what << ": the compute-tier peak " << ev.peak.gpu
                                            << " is over the plan's " << p.predicted_peak.gpu
                                            << " without the head gradient live or a weight load ahead";
            EXPECT_LE(ev.peak.gpu - head_grad - ahead, p.predicted_peak.gpu * (1 + 1e-6)) << what;
            std::printf("    peak %.3f GB over the plan's %.3f GB at %.4f s, with g.head (%.3f GB) still draining "
                        "and weight slots (%.3f GB) loading ahead of their windows\n",
                        ev.peak.gpu / 1e9, p.predicted_peak.gpu / 1e9, t_peak, head_grad / 1e9, ahead / 1e9);
          }
          if (ev.peak.cpu > p.predicted_peak.cpu * (1 + 1e-6)) {
            const double t_host = host_peak_time(ev, p), ahead = nvme_reads_ahead(ev, p, t_host);
            EXPECT_LE(ev.peak.cpu - ahead, p.predicted_peak.cpu * (1 + 1e-6))
                << what << ": the host peak is over the plan's by more than the NVMe reads staged ahead";
            std::printf("    host peak %.3f GB over the plan's %.3f GB at %.4f s, with NVMe reads (%.3f GB) staged "
                        "ahead of their windows\n",
                        ev.peak.cpu / 1e9, p.predicted_peak.cpu / 1e9, t_host, ahead / 1e9);
          }
          EXPECT_NEAR(ev.peak.nvme, p.predicted_peak.nvme, 1e-6 * p.predicted_peak.nvme) << what;
        }
      }
  std::printf("%d plans (%d with a streamed head), %d outside 5%% (megatrain-code's LD windows; a streamed head's pipeline), %d over the "
              "planned compute-tier peak; largest gap %.1f%% (%s); HEAD's events up to %.2f%% of the step later than "
              "the window replay has them (%s)\n",
              plans, streamed, outside, over_peak, 100 * largest_gap, largest.c_str(), 100 * max_head_late,
              latest_head.c_str());
  // Every profile and preset gave plans for most policies (the MILP may find none in time).
  EXPECT_GE(plans, static_cast<int>(json_stems("profiles").size() * json_stems("presets").size() * 2 * 5));
}

}  // namespace
}  // namespace lt
