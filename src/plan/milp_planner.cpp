#include "plan/milp_planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "core/error.h"
#include "plan/mip_model.h"
#include "plan/plan_builder.h"
#include "plan/plan_decisions.h"
#include "plan/head_streaming.h"
#include "plan/plan_evaluate.h"
#include "plan/plan_stages.h"
#include "plan/plan_validate.h"
#include "plan/state_paging.h"

namespace lt {
namespace {

constexpr double kGB = 1e9;
constexpr double kInf = std::numeric_limits<double>::infinity();
// Symmetry-breaking perturbation, relative to the step's compute time: identical layers
// make many optima; tiny distinct costs let branch-and-bound prune them. 1e-7 of the step
// is far below any reported gap.
constexpr double kPerturbation = 1e-7;
// Solution values below this (GB or fractions) are solver round-off and dropped.
constexpr double kRoundOff = 1e-9;
// Tier fractions and transfer pieces below a millionth of a boundary: round-off of a
// time-limited solve (ten times CBC's primal tolerance on a GB-scaled boundary).
constexpr double kPartRoundOff = 1e-6;

using Terms = MipModel::Terms;
using StageCols = std::map<int, int>;  // stage -> column

struct Range {
  int lo = 0, hi = -1;
  bool empty() const { return hi < lo; }
};

// The executor lays an offloaded boundary's parts out in the order their fetches begin
// (plan/stream_schedule.cpp), and a fetch of the later part's rows allocates every row
// before them. Fetches that interleave the tiers (NVMe, cpu, NVMe) so hold more than the
// MILP's memory rows count, which is the bytes reloaded through each stage. This moves
// the same bytes per stage, the cpu part first: each stage's reloaded bytes, so the
// compute-tier memory and the H2D time, stay as solved, and the NVMe part comes back no
// earlier than it did (its read still precedes it; it waits longer in host staging). Not
// where a cpu piece would then precede its own D2H (`offloaded`: the cpu part's D2H).
void fetch_cpu_part_first(std::vector<StageBytes>& cpu, std::vector<StageBytes>& nvme,
                          const std::vector<StageBytes>& offloaded) {
  if (cpu.empty() || nvme.empty()) return;
  const auto first = [](const std::vector<StageBytes>& v) { return v.front().stage; };
  const auto last = [](const std::vector<StageBytes>& v) { return v.back().stage; };
  // One part, then the other (where both begin in one stage, the cpu part is laid out first).
  if (last(cpu) <= first(nvme) || last(nvme) < first(cpu)) return;
  std::map<int, double> per_stage;
  double cpu_bytes = 0;
  for (const StageBytes& x : cpu) per_stage[x.stage] += x.bytes, cpu_bytes += x.bytes;
  for (const StageBytes& x : nvme) per_stage[x.stage] += x.bytes;
  std::vector<StageBytes> new_cpu, new_nvme;
  double left = cpu_bytes;
  for (auto [stage, bytes] : per_stage) {
    const double c = std::min(left, bytes);
    left -= c;
    if (c > 0) new_cpu.push_back({stage, c});
    if (bytes - c > 0) new_nvme.push_back({stage, bytes - c});
  }
  if (new_cpu.empty() || new_nvme.empty()) return;
  double reloaded = 0;
  for (const StageBytes& x : new_cpu) {
    reloaded += x.bytes;
    double out = 0;
    for (const StageBytes& d : offloaded)
      if (d.stage < x.stage) out += d.bytes;
    if (reloaded > out * (1 + 1e-9)) return;
  }
  cpu = std::move(new_cpu);
  nvme = std::move(new_nvme);
}

// The running plan's paging (PlanRequest::keep_paged) at the rule's stages, with its parts:
// the start a re-plan's solve begins from. Layer 1, which the rule never pages, updates in
// P1: read in P0, written back in F0.
StatePaging kept_paging(const PlanRequest& req, const CostModel& cm) {
  const int L = cm.num_layers;
  const Stages st{L};
  const PlanRequest::PagedLayers& k = *req.keep_paged;
  std::vector<int> read(L, -1), write(L, -1);
  for (int j : k.states) {
    LT_ASSERT(j >= 1 && j < L, "kept paged layer " + std::to_string(j));
    read[j] = j == 1 ? st.p0() : StatePaging::rule_read_stage(st, j);
    write[j] = j == 1 ? st.forward(0) : StatePaging::rule_write_stage(st, j);
  }
  const auto flags = [L](const std::vector<int>& layers) {
    std::vector<bool> f(L, false);
    for (int j : layers) f[j] = true;
    return f;
  };
  StatePaging p = paging_from_stages(cm, read, write);
  page_parts(p, cm, flags(k.masters), flags(k.grads));
  if (!k.copies.empty()) page_copies(p, cm, flags(k.copies));
  return p;
}

struct Milp {
  const PlanRequest& req;
  const CostModel& cm;
  const MilpOptions& opt;
  int L;
  Stages st;
  StatePaging paging;  // the rule's (plan/state_paging.h): where the solve starts from
  MipModel m;

  // Scaled constants; per layer (index j) where layers differ (a hybrid model's).
  double A, Wh, Whb, Wgh, wsh;  // Whb: the whole head's weight buffer (Wh: its bytes on the link)
  std::vector<double> W, Wg, I, wsf, wsb, wsr;
  double bh, bd, bnr, bnw;
  double H, toh, toe;
  std::vector<double> F, Bw, to;
  double capG, capC, capN, capStage;
  double Ws = 0, Gs = 0;  // one weight slot, one gradient slot (GB)
  bool use_cpu = false, use_nvme = false;

  std::vector<int> t;                 // per stage
  std::map<std::pair<int, int>, int> x;
  std::vector<int> z, g, c, n, y, k;  // z[0], z[L] are -1 (constant 1)
  std::vector<StageCols> dc, dn, q, r, hc, hn, o;
  StageCols oh;
  // The head: held whole, or streamed in chunks of head_rows vocabulary rows when hs = 1
  // (a column only when the vocabulary makes two chunks). Streamed: buffers Wh_s and Wgh_s
  // instead of Wh and Wgh, F{L-1} prefetches Ph_s instead of Wh, and HEAD loads Hh_s more
  // (the rest of both passes; plan/cost_model.h HeadFootprint), all in GB.
  int hs = -1;
  int64_t head_rows = 0;
  double Wh_s = 0, Wgh_s = 0, Ph_s = 0, Hh_s = 0;
  std::vector<Range> rdoff, rq, rr, rh;
  std::vector<bool> nvme_possible;  // the NVMe chain fits in boundary b's stage ranges
  // Transfer windows off the rule (plan_decisions.h), per layer, binary: lf[j][q] layer j
  // loaded for F{j} in stage q < F{j-1}; lb[j][s] loaded for B{j} in stage s (HEAD or slot
  // k > j+1); gd[j][s] its gradients drained in stage s (slot k < j-1, or E). None set:
  // the rule's window.
  std::vector<StageCols> lf, lb, gd;
  // Optimizer-state paging, when this solve decides it (page): pg[j] layer j's state pages
  // (binary, -1 for layer 0, which updates in P0 with no window to read in before), read
  // in stage rd[j][s] and written back in wr[j][s] (binary), its update in upd[j] then;
  // state_slots the host staging slots of the states in flight, host_state the host
  // state in GB (what stays on the host, plus the slots).
  bool page = false;
  std::vector<int> pg;
  std::vector<StageCols> rd, wr;
  std::vector<Range> upd;
  // Its parts, where the request lets them page (-1 elsewhere): pm[j] its masters page
  // (binary, only with its state), pgr[j] its gradients (binary, only with its masters
  // where those may page: a slot's read is one prefix). They move with the state, in its
  // windows: rdm[j][s] and rdg[j][s] (continuous, at most rd[j][s], summing to pm[j] and
  // pgr[j]) carry the masters' and gradients' reads, wrm[j][s] the masters' write-back.
  std::vector<int> pm, pgr;
  std::vector<StageCols> rdm, rdg, wrm;
  // With paged gradients (PlanRequest::page_grads) grad_stage holds the host staging of
  // the gradients between their backward and their NVMe write once any layer pages.
  int state_slots = -1, host_state = -1, grad_stage = -1;
  // Paged bf16 copies (PlanRequest::page_copy): pc[j] layer j's copy pages (binary, -1
  // where it may not: plan/state_paging.h), at the rule's stages (written in F{j}, read
  // back in backward slot j+2); copy_stage holds their host staging once any pages.
  std::vector<int> pc;
  int copy_stage = -1;
  std::vector<double> C;  // per layer: its paged copy, GB
  double H0 = 0, capNTotal = 0, hostRoom = 0;
  std::vector<double> S;   // per layer: what its paging reads (state, masters, gradients), GB
  std::vector<double> Sst;  // per layer: its optimizer state alone, GB
  std::vector<double> M;   // per layer: its masters, when they may page, GB
  std::vector<double> G;   // per layer: its gradients, when they may page (written after their drain), GB
  double S_slot = 0;       // a host staging slot: the largest S

  Milp(const PlanRequest& rq_, const CostModel& cm_, const MilpOptions& o_)
      : req(rq_),
        cm(cm_),
        opt(o_),
        L(cm_.num_layers),
        st{cm_.num_layers},
        paging(rq_.keep_paged ? kept_paging(rq_, cm_) : plan_state_paging(rq_, cm_, /*lazy_optimizer=*/true)) {
    A = cm.boundary_bytes / kGB;
    for (const LayerCost& l : cm.layers) {
      W.push_back(l.weight_bytes / kGB);
      Wg.push_back(l.grad_bytes / kGB);
      I.push_back(l.internals_bytes / kGB);
      wsf.push_back(l.workspace_forward / kGB);
      wsb.push_back(l.workspace_backward / kGB);
      wsr.push_back(l.workspace_recompute / kGB);
      F.push_back(l.forward_s);
      Bw.push_back(l.backward_s);
      to.push_back(l.optimizer_s);
      S.push_back(l.paged_bytes() / kGB);
      Sst.push_back(l.state_bytes / kGB);
      M.push_back(l.master_bytes / kGB);
      G.push_back(l.grad_page_bytes / kGB);
      C.push_back(l.copy_page_bytes / kGB);
      S_slot = std::max(S_slot, S.back());
    }
    Wh = cm.head_weight_bytes / kGB;
    Whb = cm.head_footprint(0).weight_buffer_bytes / kGB;
    Wgh = cm.head_grad_bytes / kGB;
    wsh = cm.workspace_head / kGB;
    head_rows = cm.min_head_chunk_rows();
    if (head_rows > 0) {
      const HeadFootprint f = cm.head_footprint(head_rows);
      Wh_s = f.weight_buffer_bytes / kGB;
      Wgh_s = f.grad_buffer_bytes / kGB;
      Ph_s = f.prefetch_h2d_bytes / kGB;
      Hh_s = f.head_h2d_bytes / kGB;
    }
    bh = cm.h2d_bw / kGB;
    bd = cm.d2h_bw / kGB;
    bnr = cm.nvme_read_bw / kGB;
    bnw = cm.nvme_write_bw / kGB;
    H = cm.head_s;
    toh = cm.optimizer_head_s;
    toe = cm.optimizer_embed_s;
    // Weight and gradient slots only where the plan holds them (weight_slots, grad_slots).
    Ws = cm.slot_weight_bytes() / kGB;
    Gs = cm.slot_grad_bytes() / kGB;
    // Capacities shrink by a millionth, and by 128 bytes, so that solver round-off (primal
    // tolerance ~1e-7 on GB-scaled rows: ~100 bytes absolute) never lets the extracted plan
    // exceed a budget by a few bytes, however small the budget.
    constexpr double kSafety = 1 - 1e-6;
    constexpr double kSafetyBytes = 128;
    auto shrink = [&](double bytes) { return std::max(0.0, bytes * kSafety - kSafetyBytes); };
    // The plan holds boundaries in whole tokens (plan/stream_schedule.h rounds each part
    // and each fetch to tokens): a few rows a boundary more than the fractions say.
    const double rounding = 4.0 * (cm.num_layers + 1) * cm.boundary_bytes / static_cast<double>(cm.tokens);
    capG = std::max(0.0, shrink(req.gpu_cap()) - rounding) / kGB;
    H0 = cm.host_state_bytes / kGB;
    page = may_page();
    const double host = req.hardware.host_memory_bytes;
    const bool user_cpu = req.cpu_act_budget_bytes >= 0;
    if (!page) {  // nothing pages (the rule pages nothing either): the host state is fixed
      capC = shrink(req.cpu_budget(paging.host_state_bytes)) / kGB;
      capN = shrink(req.nvme_budget(paging.nvme_bytes())) / kGB;
      capStage = std::max(0.0, host * kSafety - paging.host_state_bytes) / kGB - capC;
    } else {  // the host state is a column (host_rows)
      // Default host budget: the host's 90% holds the state and the cpu activations.
      capC = shrink(user_cpu ? req.cpu_act_budget_bytes : kHostStateShare * host) / kGB;
      capN = shrink(req.nvme_budget(0)) / kGB;
      capNTotal = shrink(req.hardware.nvme_capacity_bytes) / kGB;
      // Staging for NVMe-bound activations: what the host has beyond the 90% (default), or
      // beyond the host state and the cpu budget (a row with the host state, host_rows).
      capStage = user_cpu ? kInf : (host * kSafety - shrink(kHostStateShare * host)) / kGB;
      hostRoom = host * kSafety / kGB - capC;
    }
    // A tier smaller than a millionth of a boundary cannot hold anything useful.
    // (With paging, the most room the host state can leave: all but layer 0 paged, one slot.)
    double least_state = H0 + S_slot;
    for (int j = 1; j < L; ++j) least_state -= S[j];
    use_cpu = (page && !user_cpu ? capC - least_state : capC) > 1e-6 * A;
    use_nvme = capN > 1e-6 * A && (page && user_cpu ? hostRoom - least_state : capStage) > 1e-6 * A;
  }

  static double shrink(double bytes) {
    // Capacities shrink by a millionth, and by 128 bytes (see the constructor).
    return std::max(0.0, bytes * (1 - 1e-6) - 128);
  }

  // Paging is decided here when the request asks for it, when the rule pages, or when
  // paging could give host memory that activations lack; otherwise it could only cost
  // NVMe time, and the model leaves it out (it stays small).
  bool may_page() const {
    if (L < 2 || req.nvme_state_layers == 0) return false;
    if (cm.dp.on() && cm.dp.sharded) return false;  // plan_state_paging: nothing pages
    if (req.nvme_state_layers > 0 || paging.count > 0) return true;
    const double host = req.hardware.host_memory_bytes, acts = L * cm.boundary_bytes;
    if (req.cpu_act_budget_bytes < 0) return cm.host_state_bytes + acts > kHostStateShare * host;
    return cm.host_state_bytes + req.cpu_act_budget_bytes + acts > host;
  }

  std::string sn(int w) const {
    if (w == st.p0()) return "P0";
    if (w == st.p1()) return "P1";
    if (w == st.head()) return "HEAD";
    if (w == st.epilogue()) return "E";
    if (w < st.head()) return "F" + std::to_string(w - 2);
    return "B" + std::to_string(st.backward_layer(w));
  }

  // Sum of the columns of `cols` with stage <= w (or < w when strict), times `coef`.
  static void cumulative(Terms& out, const StageCols& cols, int w, double coef, bool strict = false) {
    for (auto [s, col] : cols)
      if (strict ? s < w : s <= w) out.emplace_back(col, coef);
  }
  static void at_stage(Terms& out, const StageCols& cols, int w, double coef) {
    auto it = cols.find(w);
    if (it != cols.end()) out.emplace_back(it->second, coef);
  }
  // z_b as terms (b = 0 and L are the constant 1, returned through `constant`).
  void z_terms(Terms& out, int b, double coef, double& constant) const {
    if (b == 0 || b == L) constant += coef;
    else out.emplace_back(z[b], coef);
  }

  void columns() {
    double scale = H;
    for (int j = 0; j < L; ++j) scale += 2 * F[j] + Bw[j];
    const double eps = kPerturbation * scale;
    t.resize(st.count());
    for (int w = 0; w < st.count(); ++w) t[w] = m.add_col("t_" + sn(w), 0, kInf, 1.0, false);
    // A block's recompute windows RC{s}..RC{e-2}: each reruns its layer's forward and
    // loads that layer's weights.
    auto rc_window = [&](int k) { return std::max(F[k], W[k] / bh); };
    for (int s = 0; s < L; ++s)
      for (int e = s + 1; e <= std::min(L, s + opt.max_block); ++e) {
        double cost = 0;
        for (int k = s; k + 1 < e; ++k) cost += rc_window(k);
        x[{s, e}] = m.add_col("x_" + std::to_string(s) + "_" + std::to_string(e), 0, 1, cost, true);
      }
    z.assign(L + 1, -1);
    g.assign(L, -1);
    c.assign(L, -1);
    n.assign(L, -1);
    for (int b = 1; b < L; ++b) z[b] = m.add_col("z_" + std::to_string(b), 0, 1, 0, true);
    rdoff.resize(L);
    rq.resize(L);
    rr.resize(L);
    rh.resize(L);
    for (int b = 0; b < L; ++b) {
      double pos = 1.0 + static_cast<double>(b) / L;
      g[b] = m.add_col("g_" + std::to_string(b), 0, 1, 0, false);
      c[b] = m.add_col("c_" + std::to_string(b), 0, use_cpu ? 1 : 0, eps * pos, false);
      // Transfer windows of this boundary.
      rdoff[b] = {st.forward(b), std::min(st.forward(b) + opt.offload_horizon - 1, st.head())};
      int late = b + 1 == L ? st.head() : st.backward(b + 1);
      int early = b + opt.max_block >= L ? st.head() : st.backward(b + opt.max_block);
      rh[b] = {std::max(st.head(), early - opt.reload_slack), late};
      rr[b] = {std::max(st.forward(b) + 2, rh[b].lo - opt.reload_slack), late - 1};
      rq[b] = {st.forward(b) + 1, std::min(rr[b].hi - 1, st.forward(b) + opt.offload_horizon + opt.nvme_horizon)};
      bool nvme_ok = use_nvme && !rq[b].empty() && !rr[b].empty();
      nvme_possible.push_back(nvme_ok);
      n[b] = m.add_col("n_" + std::to_string(b), 0, nvme_ok ? 1 : 0, 2 * eps * pos, false);
    }
    y.resize(L);
    k.resize(L);
    for (int j = 0; j < L; ++j) {
      y[j] = m.add_col("y_" + std::to_string(j), 0, 1, eps, true);
      k[j] = m.add_col("k_" + std::to_string(j), 0, 1, eps, true);
    }
    dc.resize(L);
    dn.resize(L);
    q.resize(L);
    r.resize(L);
    hc.resize(L);
    hn.resize(L);
    for (int b = 0; b < L; ++b) {
      std::string bs = std::to_string(b);
      bool nv = nvme_possible[b];
      for (int w = rdoff[b].lo; w <= rdoff[b].hi; ++w) {
        if (use_cpu) dc[b][w] = m.add_col("dc_" + bs + "_" + sn(w), 0, kInf, 0, false);
        if (nv) dn[b][w] = m.add_col("dn_" + bs + "_" + sn(w), 0, kInf, 0, false);
      }
      for (int w = rh[b].lo; w <= rh[b].hi; ++w) {
        if (use_cpu) hc[b][w] = m.add_col("hc_" + bs + "_" + sn(w), 0, kInf, 0, false);
        if (nv) hn[b][w] = m.add_col("hn_" + bs + "_" + sn(w), 0, kInf, 0, false);
      }
      if (nv) {
        for (int w = rq[b].lo; w <= rq[b].hi; ++w) q[b][w] = m.add_col("q_" + bs + "_" + sn(w), 0, kInf, 0, false);
        for (int w = rr[b].lo; w <= rr[b].hi; ++w) r[b][w] = m.add_col("r_" + bs + "_" + sn(w), 0, kInf, 0, false);
      }
    }
    o.resize(L);
    for (int j = 0; j < L; ++j) {
      std::string js = std::to_string(j);
      o[j][st.p0()] = m.add_col("o_" + js + "_P0", 0, 1, 0, false);
      if (j >= 1) o[j][st.p1()] = m.add_col("o_" + js + "_P1", 0, 1, 0, false);
      for (int f = std::max(0, j - 1 - opt.optimizer_horizon); f <= j - 2; ++f)
        o[j][st.forward(f)] = m.add_col("o_" + js + "_" + sn(st.forward(f)), 0, 1, 0, false);
    }
    oh[st.p0()] = m.add_col("oh_P0", 0, 1, 0, false);
    oh[st.p1()] = m.add_col("oh_P1", 0, 1, 0, false);
    // Before F{L-1}, which prefetches the head's weights.
    for (int f = std::max(0, L - 2 - opt.optimizer_horizon); f <= L - 2; ++f)
      oh[st.forward(f)] = m.add_col("oh_" + sn(st.forward(f)), 0, 1, 0, false);
    transfer_window_columns(eps);
    if (page) paging_columns(eps);
    // Streaming the head costs a perturbation: held whole when that is as fast.
    if (head_rows > 0) hs = m.add_col("head_streamed", 0, 1, eps, true);
  }

  // Sum over boundaries of a transfer family at one stage.
  Terms family_at(const std::vector<StageCols>& fam, int w, double coef) const {
    Terms out;
    for (int b = 0; b < L; ++b) at_stage(out, fam[b], w, coef);
    return out;
  }
  static void append(Terms& a, const Terms& b) { a.insert(a.end(), b.begin(), b.end()); }

  // Transfer windows: each choice off the rule costs a perturbation per stage it moves, so
  // the rule's window wins wherever moving gains nothing. A family is left out (the rule
  // kept) where no move can shorten a window, which keeps the model small:
  //  - forward loads: a forward window's h2d carries only its one load, so moving loads
  //    helps only where a load outlasts a layer's forward (W/bh > F);
  //  - gradient drains: a backward window's d2h carries only its one drain, so moving
  //    drains helps only where one outlasts a layer's backward (Wg/bd > backward);
  //  - backward loads: likewise (W/bh > backward), unless activation reloads can join a
  //    backward window's h2d.
  void transfer_window_columns(double eps) {
    lf.assign(L, {});
    lb.assign(L, {});
    gd.assign(L, {});
    bool forward_loads = false, backward_loads = use_cpu || use_nvme, drains = false;
    for (int j = 0; j < L; ++j) {
      forward_loads = forward_loads || W[j] / bh > F[std::max(0, j - 1)];
      backward_loads = backward_loads || W[j] / bh > Bw[std::min(L - 1, j + 1)];
      drains = drains || Wg[j] / bd > Bw[std::max(0, j - 1)];
    }
    for (int j = 1; j < L && forward_loads; ++j) {
      const int rule = st.forward(j - 1);
      for (int q = std::max(st.p1(), rule - opt.load_horizon); q < rule; ++q)
        lf[j][q] = m.add_col("lf_" + std::to_string(j) + "_" + sn(q), 0, 1, eps * (rule - q), true);
    }
    for (int j = 0; j + 2 <= L && backward_loads; ++j)
      for (int k = j + 2; k <= std::min(L, j + 1 + opt.load_horizon); ++k) {
        const int s = st.backward(k);  // backward(L) is HEAD
        lb[j][s] = m.add_col("lb_" + std::to_string(j) + "_" + sn(s), 0, 1, eps * (k - j - 1), true);
      }
    for (int j = 1; j < L && drains; ++j)
      for (int d = 1; d <= opt.drain_horizon && j - 1 - d >= -1; ++d) {
        const int s = st.backward(j - 1 - d);  // backward(-1) is E
        gd[j][s] = m.add_col("gd_" + std::to_string(j) + "_" + sn(s), 0, 1, eps * d, true);
      }
  }

  // Paging columns for layers 1..L-1. A paged layer's update runs in its forward range
  // (P1 on for the lowest layers, F{j-1-optimizer_horizon}..F{j-2} above), its read up to
  // state_horizon stages before that range, its write up to state_horizon after. Paging a
  // layer, and each stage off the rule's (read in the stage before F{j-2}, write in the
  // one after), costs a perturbation: the fewest states page, the top layers first.
  void paging_columns(double eps) {
    pg.assign(L, -1);
    rd.assign(L, {});
    wr.assign(L, {});
    upd.assign(L, {});
    pm.assign(L, -1);
    pgr.assign(L, -1);
    rdm.assign(L, {});
    rdg.assign(L, {});
    wrm.assign(L, {});
    const int h = std::max(1, opt.state_horizon);  // at least the rule's stages
    for (int j = 1; j < L; ++j) {
      const std::string js = std::to_string(j);
      const Range u{std::max(st.p1(), st.forward(j - 1 - opt.optimizer_horizon)), st.forward(j - 2)};
      upd[j] = u;
      const int rule_r = j >= 2 ? StatePaging::rule_read_stage(st, j) : -1;
      const int rule_w = j >= 2 ? StatePaging::rule_write_stage(st, j) : -1;
      pg[j] = m.add_col("pg_" + js, 0, 1, eps * (2 - static_cast<double>(j) / L), true);
      for (int s = std::max(st.p0(), u.lo - h); s < u.hi; ++s)
        rd[j][s] = m.add_col("rd_" + js + "_" + sn(s), 0, 1, s == rule_r ? 0 : eps, true);
      for (int s = u.lo + 1; s <= std::min(st.head(), u.hi + h); ++s)
        wr[j][s] = m.add_col("wr_" + js + "_" + sn(s), 0, 1, s == rule_w ? 0 : eps, true);
      part_columns(j, eps);
    }
    state_slots = m.add_col("state_slots", 0, kInf, eps, false);
    host_state = m.add_col("host_state", 0, kInf, 0, false);
    if (*std::max_element(G.begin(), G.end()) > 0) grad_stage = m.add_col("grad_stage", 0, kInf, eps, false);
    pc.assign(L, -1);
    if (!req.page_copy) return;
    for (int j = 0; j < L; ++j)
      if (StatePaging::copy_may_page(L, j) && C[j] > 0)
        pc[j] = m.add_col("pc_" + std::to_string(j), 0, 1, eps * (2 - static_cast<double>(j) / L), true);
    copy_stage = m.add_col("copy_stage", 0, kInf, eps, false);
  }

  // Layer j's masters and gradients, where they may page (the fewest parts page, as
  // the fewest states: each costs a perturbation).
  void part_columns(int j, double eps) {
    const std::string js = std::to_string(j);
    const double cost = eps * (2 - static_cast<double>(j) / L);
    if (M[j] > 0) {
      pm[j] = m.add_col("pm_" + js, 0, 1, cost, true);
      for (auto [s, col] : rd[j]) rdm[j][s] = m.add_col("rdm_" + js + "_" + sn(s), 0, 1, 0, false);
      for (auto [s, col] : wr[j]) wrm[j][s] = m.add_col("wrm_" + js + "_" + sn(s), 0, 1, 0, false);
    }
    if (G[j] > 0) {
      pgr[j] = m.add_col("pgr_" + js, 0, 1, cost, true);
      for (auto [s, col] : rd[j]) rdg[j][s] = m.add_col("rdg_" + js + "_" + sn(s), 0, 1, 0, false);
    }
  }

  // H2D seconds of weight loads moved off the rule: a stage's rule load moved to an
  // earlier stage (minus), and the loads moved into it (plus).
  Terms load_terms(int w) const {
    Terms out;
    auto away = [&](const StageCols& cols, int j) {
      for (auto [s, col] : cols) out.emplace_back(col, -W[j] / bh);
    };
    if (w >= st.forward(0) && w < st.head() && w - 1 < L) away(lf[w - 1], w - 1);  // F{f} loads layer f+1
    if (st.is_backward(w) && st.backward_layer(w) >= 1) away(lb[st.backward_layer(w) - 1], st.backward_layer(w) - 1);
    for (int j = 0; j < L; ++j) {
      at_stage(out, lf[j], w, W[j] / bh);
      at_stage(out, lb[j], w, W[j] / bh);
    }
    return out;
  }
  // D2H seconds of gradient drains moved off the rule, likewise.
  Terms drain_terms(int w) const {
    Terms out;
    if (st.is_backward(w) && st.backward_layer(w) + 1 < L)  // B{k} drains layer k+1
      for (auto [s, col] : gd[st.backward_layer(w) + 1]) out.emplace_back(col, -Wg[st.backward_layer(w) + 1] / bd);
    for (int j = 0; j < L; ++j) at_stage(out, gd[j], w, Wg[j] / bd);
    return out;
  }
  // NVMe seconds of paged optimizer states read or written in stage w.
  Terms state_terms(int w) const {
    Terms out;
    if (!page) return out;
    for (int j = 1; j < L; ++j) {
      at_stage(out, rd[j], w, Sst[j] / bnr);
      at_stage(out, wr[j], w, Sst[j] / bnw);
      at_stage(out, rdm[j], w, M[j] / bnr);
      at_stage(out, wrm[j], w, M[j] / bnw);
      at_stage(out, rdg[j], w, G[j] / bnr);
      if (pgr[j] >= 0 && w == StatePaging::grad_write_stage(st, j)) out.emplace_back(pgr[j], G[j] / bnw);
      if (pc[j] >= 0 && w == StatePaging::copy_write_stage(st, j)) out.emplace_back(pc[j], C[j] / bnw);
      if (pc[j] >= 0 && w == StatePaging::copy_read_stage(st, j)) out.emplace_back(pc[j], C[j] / bnr);
    }
    return out;
  }
  // Compute-tier GB of the weight slots held in stage w by the rule's loads
  // (plan_builder.cpp): each compute window holds its layer's slot and the one it
  // prefetches for the next compute (P1 and HEAD only the latter; F{L-1} and B0 only the
  // former: the head has buffers of its own, and nothing follows B0). A resident layer's
  // backward loads nothing, which this counts as if it did. Early loads add slot_terms.
  double weight_slots(int w) const {
    if (w == st.p1() || w == st.head()) return Ws;
    if (w == st.forward(L - 1) || w == st.backward(0)) return Ws;
    if (w == st.p0() || w == st.epilogue()) return 0;
    return 2 * Ws;
  }
  // Compute-tier GB of the gradient slots held in stage w by the rule's drains
  // (plan_builder.cpp): B{j} fills layer j's slot while layer j+1's drains (one slot in
  // B{L-1}, whose predecessor is the head with its own; one in a recompute window, which
  // the stage of the block's top layer holds, while the last B's drains); E drains
  // layer 0's. Late drains add slot_terms.
  double grad_slots(int w) const {
    if (w == st.epilogue()) return Gs;
    if (!st.is_backward(w)) return 0;
    return st.backward_layer(w) + 1 < L ? 2 * Gs : Gs;
  }
  // Compute-tier GB of the slots beyond the rule's held in stage w: a weight
  // loaded early from its load to the stage before the rule's load; a gradient drained
  // late from the stage after the rule's drain to its own.
  Terms slot_terms(int w) const {
    Terms out;
    for (int j = 0; j < L; ++j) {
      for (auto [s, col] : lf[j])
        if (s <= w && w < st.forward(j - 1)) out.emplace_back(col, W[j]);
      for (auto [s, col] : lb[j])
        if (s <= w && w <= st.backward(j + 2)) out.emplace_back(col, W[j]);
      for (auto [s, col] : gd[j])
        if (st.backward(j - 2) <= w && w <= s) out.emplace_back(col, Wg[j]);
    }
    return out;
  }

  void transfer_window_rows() {
    for (int j = 0; j < L; ++j) {
      const std::string js = std::to_string(j);
      auto at_most_one = [&](const char* name, const StageCols& cols, Terms tt) {
        if (cols.empty()) return;
        for (auto [s, col] : cols) tt.emplace_back(col, 1);
        m.add_row(std::string(name) + "_" + js, tt, -kInf, 1);
      };
      at_most_one("lf_one", lf[j], {});
      at_most_one("lb_one", lb[j], {{y[j], 1}});  // a resident layer loads nothing for B{j}
      at_most_one("gd_one", gd[j], {});
      // An early backward load of B{j}'s weights in slot k (HEAD for k = L): boundaries
      // j..k stored, so that B{j} follows B{j+1}, no recompute window lies between, and
      // slot k holds no recompute window either (its row then counts the extra slot
      // exactly).
      for (auto [s, col] : lb[j]) {
        const int k = s == st.head() ? L : st.backward_layer(s);
        for (int b = std::max(j, 1); b <= std::min(k, L - 1); ++b)
          m.add_row("lb_z_" + js + "_" + sn(s) + "_" + std::to_string(b), {{col, 1}, {z[b], -1}}, -kInf, 0);
      }
      // The update finishes in a stage before the one that loads the layer for forward.
      if (!lf[j].empty())
        for (auto [u, ocol] : o[j]) {
          Terms tt{{ocol, 1}};
          for (auto [q, col] : lf[j])
            if (q <= u) tt.emplace_back(col, 1);
          if (tt.size() > 1) m.add_row("upd_load_" + js + "_" + sn(u), tt, -kInf, 1);
        }
    }
    // Gradients drain in the order they are produced (the executor sums their norms in that
    // order): g.j no later than g.{j-1}, i.e. for every stage s, g.j still to drain after s
    // implies g.{j-1} still to drain after s.
    for (int j = 2; j < L; ++j) {
      if (gd[j].empty()) continue;
      const int last = gd[j].rbegin()->first;
      for (int s = st.backward(j - 2); s < last; ++s) {
        Terms tt;
        for (auto [q, col] : gd[j])
          if (q > s) tt.emplace_back(col, 1);
        for (auto [q, col] : gd[j - 1])
          if (q > s) tt.emplace_back(col, -1);
        m.add_row("gd_order_" + std::to_string(j) + "_" + sn(s), tt, -kInf, 0);
      }
    }
  }

  void paging_rows() {
    Terms count, state{{host_state, 1}, {state_slots, -S_slot}};
    const double grad_staging = StatePaging::kGradStagingLayers * *std::max_element(G.begin(), G.end());
    if (grad_stage >= 0) state.emplace_back(grad_stage, -1);
    for (int j = 1; j < L; ++j) {
      const std::string js = std::to_string(j);
      count.emplace_back(pg[j], 1);
      state.emplace_back(pg[j], Sst[j]);
      part_rows(j, state);
      if (pgr[j] >= 0) {
        // Its gradients stage on the host between backward and their write (one reservation
        // for all paged layers), and drain by the rule: their write follows in the next stage.
        m.add_row("grad_stage_" + js, {{grad_stage, 1}, {pgr[j], -grad_staging}}, 0, kInf);
        Terms rule_drain{{pgr[j], 1}};
        for (auto [s, col] : gd[j]) rule_drain.emplace_back(col, 1);
        if (rule_drain.size() > 1) m.add_row("grad_drain_rule_" + js, rule_drain, -kInf, 1);
      }
      Terms r{{pg[j], -1}}, w{{pg[j], -1}};
      for (auto [s, col] : rd[j]) r.emplace_back(col, 1);
      for (auto [s, col] : wr[j]) w.emplace_back(col, 1);
      m.add_row("pg_read_" + js, r, 0, 0);
      m.add_row("pg_write_" + js, w, 0, 0);
      // Every part of a paged layer's update lies strictly between its read and its write.
      for (auto [u, ocol] : o[j]) {
        if (u < upd[j].lo || u > upd[j].hi) {
          m.add_row("pg_upd_" + js + "_" + sn(u), {{ocol, 1}, {pg[j], 1}}, -kInf, 1);
          continue;
        }
        Terms before{{ocol, 1}, {pg[j], 1}}, after{{ocol, 1}, {pg[j], 1}};
        for (auto [s, col] : rd[j])
          if (s < u) before.emplace_back(col, -1);
        for (auto [s, col] : wr[j])
          if (s > u) after.emplace_back(col, -1);
        m.add_row("pg_before_" + js + "_" + sn(u), before, -kInf, 1);
        m.add_row("pg_after_" + js + "_" + sn(u), after, -kInf, 1);
      }
    }
    copy_rows(state);
    if (req.nvme_state_layers > 0) m.add_row("pg_count", count, req.nvme_state_layers, req.nvme_state_layers);
    if (req.keep_paged) keep_paged_columns();
    // Host staging slots: at least the states read and not yet written back in any stage
    // (a state holds its slot from its read window through its write window).
    for (int s = st.p0(); s <= st.head(); ++s) {
      Terms tt{{state_slots, -1}};
      for (int j = 1; j < L; ++j) {
        if (rd[j].empty() || s < rd[j].begin()->first || s > wr[j].rbegin()->first) continue;
        for (auto [r, col] : rd[j])
          if (r <= s) tt.emplace_back(col, 1);
        for (auto [w, col] : wr[j])
          if (w < s) tt.emplace_back(col, -1);
      }
      if (tt.size() > 1) m.add_row("slots_" + sn(s), tt, -kInf, 0);
    }
    m.add_row("host_state_def", state, H0, H0);
    m.add_row("host_state_share", {{host_state, 1}}, -kInf, shrink(kHostStateShare * req.hardware.host_memory_bytes) / kGB);
  }

  // A part pages only with its state (gradients with the masters where those may page),
  // moves in the state's windows, and leaves the host state.
  void part_rows(int j, Terms& state) {
    const std::string js = std::to_string(j);
    const auto moves_with = [&](int part, const StageCols& part_cols, const StageCols& state_cols, const char* name) {
      Terms sum{{part, -1}};
      for (auto [s, col] : part_cols) {
        sum.emplace_back(col, 1);
        m.add_row(std::string(name) + "_le_" + js + "_" + sn(s), {{col, 1}, {state_cols.at(s), -1}}, -kInf, 0);
      }
      m.add_row(std::string(name) + "_sum_" + js, sum, 0, 0);
    };
    if (pm[j] >= 0) {
      m.add_row("pm_pg_" + js, {{pm[j], 1}, {pg[j], -1}}, -kInf, 0);
      moves_with(pm[j], rdm[j], rd[j], "rdm");
      moves_with(pm[j], wrm[j], wr[j], "wrm");
      state.emplace_back(pm[j], M[j]);
    }
    if (pgr[j] >= 0) {
      m.add_row("pgr_pm_" + js, {{pgr[j], 1}, {pm[j] >= 0 ? pm[j] : pg[j], -1}}, -kInf, 0);
      moves_with(pgr[j], rdg[j], rd[j], "rdg");
      state.emplace_back(pgr[j], G[j]);
    }
  }

  // A re-plan keeps what pages (PlanRequest::keep_paged): each layer's state, masters,
  // gradients and copy fixed to the running plan's lists (a listed part the request gives
  // no column cannot page: such a re-plan differs, and judge_replan turns it down).
  void keep_paged_columns() {
    const PlanRequest::PagedLayers& k = *req.keep_paged;
    const auto listed = [](const std::vector<int>& layers, int j) {
      return std::find(layers.begin(), layers.end(), j) != layers.end() ? 1.0 : 0.0;
    };
    for (int j = 0; j < L; ++j) {
      if (pg[j] >= 0) m.fix(pg[j], listed(k.states, j));
      if (pm[j] >= 0) m.fix(pm[j], listed(k.masters, j));
      if (pgr[j] >= 0) m.fix(pgr[j], listed(k.grads, j));
      if (pc[j] >= 0) m.fix(pc[j], listed(k.copies, j));
    }
  }

  // A paged copy (pc[j]): of a paged layer, whose output boundary is stored (no recompute
  // reads it), which is not resident, whose weights load by the rule, and whose update runs
  // no earlier than F{j-2} (so that three layers' copies at most are staged at once); its
  // bytes leave the host state for NVMe, its staging joins it.
  void copy_rows(Terms& state) {
    if (copy_stage < 0) return;
    const double C_slot = *std::max_element(C.begin(), C.end());
    state.emplace_back(copy_stage, -1);
    for (int j = 0; j < L; ++j) {
      if (pc[j] < 0) continue;
      const std::string js = std::to_string(j);
      state.emplace_back(pc[j], C[j]);
      m.add_row("pc_pm_" + js, {{pc[j], 1}, {pm[j] >= 0 ? pm[j] : pg[j], -1}}, -kInf, 0);
      m.add_row("pc_stored_" + js, {{pc[j], 1}, {z[j + 1], -1}}, -kInf, 0);
      m.add_row("pc_resident_" + js, {{pc[j], 1}, {y[j], 1}}, -kInf, 1);
      m.add_row("copy_stage_" + js, {{copy_stage, 1}, {pc[j], -StatePaging::kCopyStagingLayers * C_slot}}, 0, kInf);
      for (const StageCols* loads : {&lf[j], &lb[j]})
        for (auto [s, col] : *loads) m.add_row("pc_load_" + js + "_" + sn(s), {{pc[j], 1}, {col, 1}}, -kInf, 1);
      for (auto [u, ocol] : o[j])
        if (u < st.forward(j - 2)) m.add_row("pc_upd_" + js + "_" + sn(u), {{pc[j], 1}, {ocol, 1}}, -kInf, 1);
    }
  }

  void rows() {
    // Path flow over recompute blocks.
    for (int b = 0; b <= L; ++b) {
      Terms in, out;
      for (auto& [se, col] : x) {
        if (se.second == b) in.emplace_back(col, 1);
        if (se.first == b) out.emplace_back(col, 1);
      }
      std::string bs = std::to_string(b);
      if (b == 0) {
        m.add_row("path_out_0", out, 1, 1);
      } else if (b == L) {
        m.add_row("path_in_L", in, 1, 1);
      } else {
        in.emplace_back(z[b], -1);
        out.emplace_back(z[b], -1);
        m.add_row("path_in_" + bs, in, 0, 0);
        m.add_row("path_out_" + bs, out, 0, 0);
      }
    }
    for (int b = 0; b < L; ++b) {
      std::string bs = std::to_string(b);
      Terms tiers{{g[b], 1}, {c[b], 1}, {n[b], 1}};
      if (b == 0) {
        m.add_row("tiers_0", tiers, 1, 1);
      } else {
        tiers.emplace_back(z[b], -1);
        m.add_row("tiers_" + bs, tiers, 0, 0);
      }
      // Transfer totals.
      auto total = [&](const char* name, const StageCols& cols, int part) {
        Terms tt;
        for (auto [s, col] : cols) tt.emplace_back(col, 1);
        tt.emplace_back(part, -A);
        m.add_row(std::string(name) + "_" + bs, tt, 0, 0);
      };
      total("tot_dc", dc[b], c[b]);
      total("tot_hc", hc[b], c[b]);
      total("tot_dn", dn[b], n[b]);
      total("tot_q", q[b], n[b]);
      total("tot_r", r[b], n[b]);
      total("tot_hn", hn[b], n[b]);
      // Order: each step of the chain moves only bytes that arrived in earlier stages.
      // Cumulative columns (cum[w] = cum[w-1] + flow[w]) keep these rows at two terms.
      auto cumulative_cols = [&](const char* name, const StageCols& cols, const Range& range) {
        std::map<int, int> cum;
        if (cols.empty()) return cum;
        for (int w = range.lo; w <= range.hi; ++w) {
          cum[w] = m.add_col(std::string(name) + "_" + bs + "_" + sn(w), 0, kInf, 0, false);
          Terms tt{{cum[w], 1}};
          if (w > range.lo) tt.emplace_back(cum[w - 1], -1);
          at_stage(tt, cols, w, -1);
          m.add_row(std::string(name) + "_def_" + bs + "_" + sn(w), tt, 0, 0);
        }
        return cum;
      };
      auto cum_dn = cumulative_cols("cdn", dn[b], rdoff[b]);
      auto cum_q = cumulative_cols("cq", q[b], rq[b]);
      auto cum_r = cumulative_cols("cr", r[b], rr[b]);
      auto cum_hn = cumulative_cols("chn", hn[b], rh[b]);
      auto chain = [&](const char* name, const std::map<int, int>& later, const std::map<int, int>& earlier) {
        if (later.empty()) return;
        for (auto [w, col] : later) {
          Terms tt{{col, 1}};
          auto it = earlier.upper_bound(w - 1);  // first stage > w-1
          if (it != earlier.begin()) tt.emplace_back(std::prev(it)->second, -1);  // through w-1
          m.add_row(std::string(name) + "_" + bs + "_" + sn(w), tt, -kInf, 0);
        }
      };
      chain("ord_q", cum_q, cum_dn);
      chain("ord_r", cum_r, cum_q);
      chain("ord_hn", cum_hn, cum_r);
      auto old_chain = [&](const char* name, const StageCols& later, const StageCols& earlier, const Range& range) {
        if (later.empty()) return;
        for (int w = range.lo; w <= range.hi; ++w) {
          Terms tt;
          cumulative(tt, later, w, 1);
          cumulative(tt, earlier, w, -1, /*strict=*/true);
          m.add_row(std::string(name) + "_" + bs + "_" + sn(w), tt, -kInf, 0);
        }
      };
      old_chain("ord_hc", hc[b], dc[b], Range{rh[b].lo, std::min(rh[b].hi, rdoff[b].hi)});
      // Reload deadlines: with block (b, e) chosen, all of b's offloaded bytes are back by
      // the stage before the block starts. back[w] = bytes of b reloaded through stage w.
      if (hc[b].empty() && hn[b].empty()) continue;
      std::map<int, int> back;
      for (int w = rh[b].lo; w <= rh[b].hi; ++w) {
        back[w] = m.add_col("back_" + bs + "_" + sn(w), 0, kInf, 0, false);
        Terms tt{{back[w], 1}};
        if (w > rh[b].lo) tt.emplace_back(back[w - 1], -1);
        at_stage(tt, hc[b], w, -1);
        at_stage(tt, hn[b], w, -1);
        m.add_row("back_def_" + bs + "_" + sn(w), tt, 0, 0);
      }
      for (int e = b + 1; e <= std::min(L, b + opt.max_block); ++e) {
        int dl = e == L ? st.head() : st.backward(e);
        Terms tt{{c[b], A}, {n[b], A}, {x.at({b, e}), A}};
        if (dl >= rh[b].lo) tt.emplace_back(back.at(std::min(dl, rh[b].hi)), -1);
        m.add_row("deadline_" + bs + "_" + std::to_string(e), tt, -kInf, A);
      }
    }
    // Residency: a suffix of layers whose boundaries are stored.
    for (int j = 0; j < L; ++j) {
      std::string js = std::to_string(j);
      if (j + 1 < L) m.add_row("res_suffix_" + js, {{y[j], 1}, {y[j + 1], -1}}, -kInf, 0);
      if (j >= 1) m.add_row("res_z_" + js, {{y[j], 1}, {z[j], -1}}, -kInf, 0);
      if (j + 1 < L) m.add_row("res_z1_" + js, {{y[j], 1}, {z[j + 1], -1}}, -kInf, 0);
    }
    // Optimizer fractions.
    for (int j = 0; j < L; ++j) {
      Terms tt;
      for (auto [s, col] : o[j]) tt.emplace_back(col, 1);
      m.add_row("opt_" + std::to_string(j), tt, 1, 1);
    }
    {
      Terms tt;
      for (auto [s, col] : oh) tt.emplace_back(col, 1);
      m.add_row("opt_head", tt, 1, 1);
    }
    transfer_window_rows();
    if (page) paging_rows();
    time_rows();
    memory_rows();
    host_rows();
  }

  void time_rows() {
    auto lower = [&](int w, double v) { lb_[w] = std::max(lb_[w], v); };
    lb_.assign(st.count(), 0);
    auto link_row = [&](const std::string& name, int w, Terms tt, double constant) {
      // constant + terms <= t_w
      if (tt.empty()) {
        lower(w, constant);
        return;
      }
      tt.emplace_back(t[w], -1);
      m.add_row(name + "_" + sn(w), tt, -kInf, -constant);
    };
    // Data-parallel ranks (plan/data_parallel.h): sharded, a target's update placement is
    // where its weights come in over the net; the rank's own part updates in P0.
    const DataParallelCosts& dp = cm.dp;
    const bool sharded = dp.on() && dp.sharded;
    auto host_terms = [&](int w) {
      Terms tt;
      if (sharded) return tt;
      for (int j = 0; j < L; ++j) at_stage(tt, o[j], w, to[j]);
      at_stage(tt, oh, w, toh);
      return tt;
    };
    double net_constant = 0;  // net_terms' constant part, for the row that reads it
    auto slot_sum_stage = [&](int j) { return j >= 1 ? st.backward(j - 1) : st.epilogue(); };
    auto net_terms = [&](int w) {
      Terms tt;
      net_constant = 0;
      if (!dp.on()) return tt;
      const double bw = dp.network_bw / kGB;  // GB/s, as the byte columns
      auto sum_s = [&](double params) { return dp.sum_bytes(params) / kGB / bw; };
      // Sums start in the stage after their gradients drain (P0 after E); slot sums in the
      // stage after the layer's backward, where its drain is by the rule, and in HEAD.
      auto next = [&](int s) { return s == st.epilogue() ? st.p0() : s + 1; };
      for (int j = 0; j < L; ++j) {
        const double s = sum_s(cm.layer(j).params);
        const int rule = dp.slot_sums ? slot_sum_stage(j) : next(j >= 1 ? st.backward(j - 1) : st.epilogue());
        for (auto [d, col] : gd[j]) {
          if (dp.slot_sums) break;
          if (next(d) == w) tt.emplace_back(col, s);
          if (rule == w) tt.emplace_back(col, -s);
        }
        if (rule == w) net_constant += s;
      }
      if (w == (dp.slot_sums ? st.head() : st.backward(L - 1))) net_constant += sum_s(cm.head_params);
      if (w == st.p0()) net_constant += sum_s(cm.embed_params);
      if (sharded) {
        auto bcast_s = [&](double params) { return dp.weight_bytes(params) / kGB / bw; };
        for (int j = 0; j < L; ++j) at_stage(tt, o[j], w, bcast_s(cm.layer(j).params));
        at_stage(tt, oh, w, bcast_s(cm.head_params));
        if (w == st.p0()) net_constant += bcast_s(cm.embed_params);
      }
      return tt;
    };
    auto net_row = [&](int w) {
      Terms tt = net_terms(w);
      if (dp.on()) link_row("net", w, tt, net_constant);
    };
    // Slot sums: a slot drains after its sum, so the D2H lane waits behind it (the drains
    // moved into the stage are listed before, their own row bounds them); a layer's
    // gradient exists when its stage starts, the head's sum waits for the head's compute.
    auto sum_seconds = [&](double params) { return dp.sum_bytes(params) / dp.network_bw; };
    auto slot_sum_drain_row = [&](int j, double after_s) {  // after_s: D2H seconds listed after g.<j>
      Terms moved;
      for (auto [d, col] : gd[j]) moved.emplace_back(col, -Wg[j] / bd);  // drained in a later stage
      link_row("sum_d2h", slot_sum_stage(j), moved, sum_seconds(cm.layer(j).params) + Wg[j] / bd + after_s);
    };
    auto d2h_terms = [&](int w) {
      Terms tt = family_at(dc, w, 1 / bd);
      append(tt, family_at(dn, w, 1 / bd));
      return tt;
    };
    auto h2d_terms = [&](int w) {
      Terms tt = family_at(hc, w, 1 / bh);
      append(tt, family_at(hn, w, 1 / bh));
      return tt;
    };
    auto nvme_terms = [&](int w) {
      Terms tt = family_at(q, w, 1 / bnw);
      append(tt, family_at(r, w, 1 / bnr));
      append(tt, state_terms(w));
      return tt;
    };
    // P0: the embedding's update, and whatever the plan runs there; with data-parallel
    // ranks after the last sums (sharded: the rank's part, then the weights it sends).
    {
      Terms tt = host_terms(st.p0());
      append(tt, net_terms(st.p0()));
      link_row("host", st.p0(), tt, (sharded ? dp.owned_update_s : toe) + net_constant);
    }
    link_row("nvme", st.p0(), nvme_terms(st.p0()), 0);
    // P1: layer 0 and the embedded input (and layers loaded early).
    link_row("h2d", st.p1(), load_terms(st.p1()), (W[0] + A) / bh);
    link_row("nvme", st.p1(), nvme_terms(st.p1()), 0);
    link_row("host", st.p1(), host_terms(st.p1()), 0);
    net_row(st.p1());
    for (int j = 0; j < L; ++j) {
      int w = st.forward(j);
      lower(w, F[j]);
      if (j + 1 < L) link_row("h2d", w, load_terms(w), W[j + 1] / bh);  // the next layer's weights (or loads moved here)
      else if (hs < 0) lower(w, Wh / bh);  // the head's
      else link_row("h2d_head", w, {{hs, -(Wh - Ph_s) / bh}}, Wh / bh);  // a streamed head: norm and chunk 0
      link_row("d2h", w, d2h_terms(w), 0);
      link_row("nvme", w, nvme_terms(w), 0);
      link_row("host", w, host_terms(w), 0);
      net_row(w);
    }
    {
      int w = st.head();
      lower(w, H);
      Terms h2d = h2d_terms(w);
      append(h2d, load_terms(w));
      h2d.emplace_back(y[L - 1], -W[L - 1] / bh);
      if (hs >= 0) h2d.emplace_back(hs, Hh_s / bh);  // a streamed head's chunks, both passes
      link_row("h2d", w, h2d, W[L - 1] / bh);
      link_row("d2h", w, d2h_terms(w), Wgh / bd);
      link_row("nvme", w, nvme_terms(w), 0);
      if (dp.on() && dp.slot_sums) {  // the head's sum after its compute, then its drains
        link_row("sum_d2h", w, d2h_terms(w), H + sum_seconds(cm.head_params) + Wgh / bd);
        Terms net = net_terms(w);
        link_row("net", w, net, H + net_constant);
      } else {
        net_row(w);
      }
    }
    for (int j = L - 1; j >= 0; --j) {
      int w = st.backward(j);
      link_row("compute", w, {{k[j], -F[j]}}, Bw[j] + F[j]);
      Terms h2d = h2d_terms(w);
      append(h2d, load_terms(w));
      double constant = 0;
      if (j >= 1) {
        h2d.emplace_back(y[j - 1], -W[j - 1] / bh);
        constant = W[j - 1] / bh;
      }
      link_row("h2d", w, h2d, constant);
      link_row("d2h", w, drain_terms(w), j + 1 < L ? Wg[j + 1] / bd : 0);  // layer j+1's gradients (or drains moved)
      link_row("nvme", w, nvme_terms(w), 0);
      net_row(w);
      if (dp.on() && dp.slot_sums && j + 1 < L) slot_sum_drain_row(j + 1, 0);
    }
    link_row("d2h", st.epilogue(), drain_terms(st.epilogue()), (Wg[0] + A) / bd);
    net_row(st.epilogue());
    if (dp.on() && dp.slot_sums) slot_sum_drain_row(0, A / bd);  // dx.0 after g.0
    for (int w = 0; w < st.count(); ++w) m.set_lb(t[w], lb_[w]);
    if (page) state_time_cuts();
  }
  std::vector<double> lb_;

  // A paged state moves whole in one window, and a window lasts at least its fixed lower
  // bound lb (its compute, say), so each read or write adds at least its time beyond lb:
  //   t_w >= lb_w + sum of (read or write seconds - lb_w, if positive) over the states
  //   moved in w.
  // Valid for every integer choice (one transfer: its own time; more: no more than their
  // sum), and it stops the LP relaxation from spreading a state over many windows for free
  // (fractional reads each hidden under a window's compute), which left gaps of ~10% on
  // the 27B case with paging.
  void state_time_cuts() {
    for (int w = st.p0(); w <= st.head(); ++w) {
      Terms tt;
      for (int j = 1; j < L; ++j) {
        move_cut(tt, w, Sst[j] / bnr, rd[j], M[j] / bnr, rdm[j], G[j] / bnr, rdg[j]);
        move_cut(tt, w, Sst[j] / bnw, wr[j], M[j] / bnw, wrm[j], 0, {});
      }
      if (tt.empty()) continue;
      tt.emplace_back(t[w], -1);
      m.add_row("state_cut_" + sn(w), tt, -kInf, -lb_[w]);
    }
  }

  // Layer j's move in stage w beyond lb_w, (state + masters + gradients seconds - lb_w)
  // when positive, as terms exact at every integer choice of its parts (the gradients move
  // only with the masters where those may page): with a the state's seconds beyond lb_w,
  //   a >= 0: a + masters + gradients, each with its column;
  //   a < 0: (a + masters)+ with the masters' column, and what the gradients add to that
  //          with theirs (the gradients' alone where no masters page).
  void move_cut(Terms& tt, int w, double state_s, const StageCols& state_cols, double master_s,
                const StageCols& master_cols, double grad_s, const StageCols& grad_cols) const {
    const double a = state_s - lb_[w];
    if (a >= 0) {
      at_stage(tt, state_cols, w, a);
      at_stage(tt, master_cols, w, master_s);
      at_stage(tt, grad_cols, w, grad_s);
      return;
    }
    const double with_masters = std::max(0.0, a + master_s);
    const double with_grads = std::max(0.0, a + master_s + grad_s);
    if (!master_cols.empty()) {
      if (with_masters > 0) at_stage(tt, master_cols, w, with_masters);
      if (with_grads > with_masters) at_stage(tt, grad_cols, w, with_grads - with_masters);
    } else if (std::max(0.0, a + grad_s) > 0) {
      at_stage(tt, grad_cols, w, a + grad_s);
    }
  }

  // Compute-tier memory, telescoped: live[w] = live[w-1] + what stage w allocates - what
  // stage w-1 freed (keeps rows short; summing every earlier transfer in every stage's row
  // made the matrix ~350k elements at L = 64 and the LP several times slower).
  // Allocation and free rules are those of plan_builder.cpp.
  void memory_rows() {
    const int first = st.p1(), last = st.backward(0);
    std::vector<int> live(st.count(), -1);
    for (int w = first; w <= last; ++w) live[w] = m.add_col("live_" + sn(w), 0, kInf, 0, false);
    // Terms for "freed at the end of stage w" (with sign -1 into the next stage's row).
    auto frees_at_end = [&](Terms& tt, double& constant, int w) {
      if (w == st.p1()) return;
      if (w < st.head()) {  // forward F_j: offloaded bytes, and the unstored input boundary
        int j = w - 2;
        append(tt, family_at(dc, w, -1));
        append(tt, family_at(dn, w, -1));
        if (j >= 1) {
          constant -= A;
          tt.emplace_back(z[j], A);
        }
      } else if (w == st.head()) {  // boundary L, the head's weights, offloaded bytes
        constant -= A + Whb;
        if (hs >= 0) tt.emplace_back(hs, Whb - Wh_s);  // streamed: the chunk buffers
        append(tt, family_at(dc, w, -1));
        append(tt, family_at(dn, w, -1));
      } else {  // backward slot j: everything of boundary j, resident weights, internals
        int j = st.backward_layer(w);
        for (int col : {g[j], c[j], n[j]}) tt.emplace_back(col, -A);
        tt.emplace_back(y[j], -Ws);  // a resident layer's weight slot (plan_memory.h)
        tt.emplace_back(k[j], -I[j]);
        if (j == L - 1) constant -= Wgh;  // the head's gradient slot, drained
        if (j == L - 1 && hs >= 0) tt.emplace_back(hs, Wgh - Wgh_s);
      }
    };
    for (int w = first; w <= last; ++w) {
      // live[w] - live[w-1] - allocs(w) + frees(w-1) = 0  (constants moved to the bounds)
      Terms tt{{live[w], 1}};
      double constant = 0;  // allocations that do not depend on decisions
      if (w == st.p1()) {
        constant += A;
        tt.emplace_back(y[0], -Ws);
      } else {
        tt.emplace_back(live[w - 1], -1);
        Terms fr;
        double fc = 0;
        frees_at_end(fr, fc, w - 1);
        for (auto [col, v] : fr) tt.emplace_back(col, -v);
        constant += fc;
        if (w < st.head()) {
          int j = w - 2;
          constant += A;  // boundary j+1, the output
          if (j + 1 < L) tt.emplace_back(y[j + 1], -Ws);
          if (j + 1 == L) constant += Whb;  // the head's weights, prefetched
          if (j + 1 == L && hs >= 0) tt.emplace_back(hs, Whb - Wh_s);  // streamed: the chunk buffers
          if (j >= 1) tt.emplace_back(k[j - 1], -I[j - 1]);
        } else if (w == st.head()) {
          constant += Wgh;  // the head's gradient slot
          if (hs >= 0) tt.emplace_back(hs, Wgh - Wgh_s);  // streamed: the chunk buffers
          tt.emplace_back(k[L - 1], -I[L - 1]);
        }
        append(tt, family_at(hc, w, -1));
        append(tt, family_at(hn, w, -1));
      }
      m.add_row("live_def_" + sn(w), tt, constant, constant);
      // Capacity: live bytes + workspace (+ recomputed boundaries in backward) <= cap.
      double ws = w == st.p1() ? 0 : w < st.head() ? wsf[w - 2] : w == st.head() ? wsh : wsb[st.backward_layer(w)];
      Terms cap{{live[w], 1}};
      if (w > st.head()) {
        int j = st.backward_layer(w);
        for (auto& [se, col] : x) {
          if (se.first < j && j < se.second) cap.emplace_back(col, (j - se.first) * A);
          // The block's recompute windows, which this stage holds before B{j} (top layer
          // j): where one takes more workspace than B{j} (a hybrid model's layers differ),
          // the difference.
          if (se.second == j + 1) {
            double over = 0;
            for (int k = se.first; k + 1 < se.second; ++k) over = std::max(over, wsr[k] - wsb[j]);
            if (over > 0) cap.emplace_back(col, over);
          }
        }
        // Two places where this row counts more than the plan holds, so that it also bounds
        // the recompute windows and keeps the LP tight (an exact count, with a row of their
        // own, took the 27B case from 2 s to past its 10 s limit for a step 0.06% shorter):
        // a kept layer's internals, live (int.<j>) and again in B{j}'s workspace; and the
        // head's gradient slot, through B{L-1} even where a top recompute window drained it.
      }
      append(cap, slot_terms(w));
      m.add_row("mem_" + sn(w), cap, -kInf, capG - ws - weight_slots(w) - grad_slots(w));
    }
    // E: the boundary-0 gradient and the gradients drained late into E.
    if (Terms late = slot_terms(st.epilogue()); !late.empty())
      m.add_row("mem_E_slots", late, -kInf, capG - cm.embed_grad_bytes / kGB - grad_slots(st.epilogue()));
    if (cm.embed_grad_bytes / kGB + grad_slots(st.epilogue()) > capG)  // infeasible: E alone does not fit
      m.add_row("mem_E", {{t[st.epilogue()], 0}}, 1, 0);
  }

  // Host memory for activations: the cpu parts are reserved for the whole step and bounded
  // by the host activation budget; NVMe-bound bytes are staged in host memory from their
  // D2H (or NVMe read) until their NVMe write (or H2D) has completed, bounded by what the
  // host has left beyond its state and the activation budget. Telescoped like the
  // compute tier.
  void host_rows() {
    Terms base;
    for (int b = 0; b < L; ++b) base.emplace_back(c[b], A);
    if (page && req.cpu_act_budget_bytes < 0) base.emplace_back(host_state, 1);  // the 90% holds both
    m.add_row("host_budget", base, -kInf, capC);
    if (page) {  // NVMe holds the paged states and the NVMe activations
      Terms tot;
      for (int j = 1; j < L; ++j) tot.emplace_back(pg[j], S[j]);
      for (int j = 0; j < L; ++j)
        if (pc[j] >= 0) tot.emplace_back(pc[j], C[j]);
      if (use_nvme)
        for (int b = 0; b < L; ++b) tot.emplace_back(n[b], A);
      m.add_row("nvme_capacity", tot, -kInf, capNTotal);
    }
    if (!use_nvme) return;
    Terms nv;
    for (int b = 0; b < L; ++b) nv.emplace_back(n[b], A);
    m.add_row("nvme_budget", nv, -kInf, capN);
    int prev = -1;
    for (int w = st.forward(0); w < st.epilogue(); ++w) {
      int stg = m.add_col("staging_" + sn(w), 0, capStage, 0, false);
      if (page && req.cpu_act_budget_bytes >= 0)  // within what the host state and the cpu budget leave
        m.add_row("staging_room_" + sn(w), {{stg, 1}, {host_state, 1}}, -kInf, hostRoom);
      Terms tt{{stg, 1}};
      if (prev >= 0) {
        tt.emplace_back(prev, -1);
        append(tt, family_at(q, w - 1, 1));
        append(tt, family_at(hn, w - 1, 1));
      }
      append(tt, family_at(dn, w, -1));
      append(tt, family_at(r, w, -1));
      m.add_row("staging_def_" + sn(w), tt, 0, 0);
      prev = stg;
    }
  }

  // MilpOptions::fixed_structure: `d`'s tiers, activation transfers, residency and kept
  // internals imposed on the model.
  void fix_structure(const Decisions& d) {
    LT_ASSERT(static_cast<int>(d.boundaries.size()) == L + 1 && static_cast<int>(d.traffic.size()) == L + 1,
              "fixed structure");
    for (int b = 1; b < L; ++b) m.fix(z[b], d.boundaries[b].recompute ? 0 : 1);
    for (int b = 0; b < L; ++b) {
      const BoundaryPlacement& bp = d.boundaries[b];
      const bool stored = b == 0 || !bp.recompute;
      m.fix(g[b], stored ? bp.gpu : 0);
      m.fix(c[b], stored ? bp.cpu : 0);
      m.fix(n[b], stored ? bp.nvme : 0);
      auto fix_family = [&](const StageCols& cols, const std::vector<StageBytes>& moved) {
        for (const StageBytes& x : moved)
          LT_ASSERT(cols.count(x.stage), "boundary " + std::to_string(b) + ": fixed traffic in stage " + sn(x.stage));
        for (auto [s, col] : cols) {
          double gb = 0;
          for (const StageBytes& x : moved)
            if (x.stage == s) gb += x.bytes / kGB;
          m.fix(col, gb);
        }
      };
      const BoundaryTraffic& t = d.traffic[b];
      fix_family(dc[b], t.d2h_cpu);
      fix_family(dn[b], t.d2h_nvme);
      fix_family(q[b], t.nvme_write);
      fix_family(r[b], t.nvme_read);
      fix_family(hc[b], t.h2d_cpu);
      fix_family(hn[b], t.h2d_nvme);
    }
    for (int j = 0; j < L; ++j) {
      m.fix(y[j], d.resident[j] ? 1 : 0);
      m.fix(k[j], d.keep_internals[j] ? 1 : 0);
    }
  }

  // Columns fixed to today's rules (the rule's windows, and paging `paged` with the rule's
  // stages): a first solve over the rest gives the incumbent the full solve starts from.
  std::vector<std::pair<int, double>> rule(const StatePaging& paged) const {
    std::vector<std::pair<int, double>> out;
    for (int j = 0; j < L; ++j)
      for (const StageCols* cols : {&lf[j], &lb[j], &gd[j]})
        for (auto [s, col] : *cols) out.emplace_back(col, 0);
    if (!page) return out;
    for (int j = 1; j < L; ++j) {
      const bool on = paged.on_nvme[j];
      out.emplace_back(pg[j], on ? 1 : 0);
      for (auto [s, col] : rd[j]) out.emplace_back(col, on && s == paged.read_stage[j] ? 1 : 0);
      for (auto [s, col] : wr[j]) out.emplace_back(col, on && s == paged.write_stage[j] ? 1 : 0);
      // Parts: as the paging says (all that may page, unless page_parts kept some).
      const bool masters = on && paged.master_on_nvme[j], grads = on && paged.grads_on_nvme[j];
      if (pm[j] >= 0) out.emplace_back(pm[j], masters ? 1 : 0);
      if (pgr[j] >= 0) out.emplace_back(pgr[j], grads ? 1 : 0);
      for (auto [s, col] : rdm[j]) out.emplace_back(col, masters && s == paged.read_stage[j] ? 1 : 0);
      for (auto [s, col] : wrm[j]) out.emplace_back(col, masters && s == paged.write_stage[j] ? 1 : 0);
      for (auto [s, col] : rdg[j]) out.emplace_back(col, grads && s == paged.read_stage[j] ? 1 : 0);
    }
    for (int j = 0; j < L; ++j)
      if (pc[j] >= 0) out.emplace_back(pc[j], j < static_cast<int>(paged.copy_on_nvme.size()) && paged.copy_on_nvme[j]);
    return out;
  }
  // Every layer of `all` paged with none of its parts, then parts added top layer first
  // until the host state fits `room`: masters, then gradients, then bf16 copies. What
  // pages frees the same bytes per byte moved whichever part it is; paging every layer's
  // state and as few parts as fit spreads the traffic over every forward window (the MILP
  // rarely finds such mixes alone within its time).
  StatePaging fewest_parts(const StatePaging& all, double room) const {
    if (all.on_nvme.empty()) return all;
    std::vector<bool> masters(L, false), grads(L, false);
    const auto with = [&] {
      StatePaging p = all;
      page_parts(p, cm, masters, grads);
      return p;
    };
    for (int j = L - 1; j >= 1 && with().host_state_bytes > room; --j) masters[j] = all.on_nvme[j] && M[j] > 0;
    for (int j = L - 1; j >= 1 && with().host_state_bytes > room; --j)
      grads[j] = all.on_nvme[j] && G[j] > 0 && (masters[j] || M[j] == 0);
    StatePaging p = with();
    if (p.host_state_bytes <= room || copy_stage < 0) return p;
    std::vector<bool> copies(L, false);  // and the bf16 copies that may page, likewise
    const auto with_copies = [&] {
      StatePaging q = p;
      page_copies(q, cm, copies);
      return q;
    };
    for (int j = L - 1; j >= 0 && with_copies().host_state_bytes > room; --j)
      copies[j] = pc[j] >= 0 && p.master_on_nvme[j];
    return with_copies();
  }

  // The starts: today's rule, and where paging is decided here a second one: the rule's
  // stages on layers spaced d apart from the top, so that their read-to-write intervals
  // (three stages each) overlap less: d = 3 needs one staging slot, d = 2 two, against
  // the rule's three (and it stacks no read and write in one window). The fewest layers
  // whose saving fits, or the asked count spread as far apart as three stages allows.
  // (The paging LP is weak: a state moves whole, in one window; good starts matter.)
  std::vector<std::vector<std::pair<int, double>>> starts() const {
    std::vector<std::vector<std::pair<int, double>>> out{rule(paging)};
    if (!page || req.keep_paged) return out;  // kept paging: the rule's start is the kept one
    const double room = shrink(kHostStateShare * req.hardware.host_memory_bytes);
    auto spaced = [&](int d, int count) {
      std::vector<int> read(L, -1), write(L, -1);
      for (int k = 0, j = L - 1; k < count; ++k, j -= d) {
        if (j < 2) return StatePaging{};
        read[j] = StatePaging::rule_read_stage(st, j);
        write[j] = StatePaging::rule_write_stage(st, j);
      }
      return paging_from_stages(cm, read, write);
    };
    StatePaging found;
    if (req.nvme_state_layers > 0) {
      const int count = req.nvme_state_layers;
      const int d = count > 1 ? std::min(3, (L - 3) / (count - 1)) : 3;
      if (d >= 2) found = spaced(d, count);
    } else {
      for (int d : {3, 2}) {
        for (int count = 1; count <= L && found.count == 0; ++count) {
          StatePaging p = spaced(d, count);
          if (p.on_nvme.empty()) break;
          if (p.host_state_bytes <= room) found = p;
        }
        if (found.count > 0) break;
      }
    }
    if (found.count > 0 && found.on_nvme != paging.on_nvme) out.push_back(rule(found));
    if (req.nvme_state_layers < 0) {
      const StatePaging fewest = fewest_parts(spaced(1, L - 2), room);
      if (fewest.host_state_bytes <= room) out.push_back(rule(fewest));
    }
    if (found.count == 0 && copy_stage >= 0) {  // no layer count fits without the copies: all of them page
      StatePaging all = spaced(1, L - 2);
      std::vector<bool> copy(L, false);
      for (int j = 0; j < L; ++j) copy[j] = pc[j] >= 0;
      page_copies(all, cm, copy);
      out.push_back(rule(all));
    }
    return out;
  }

  Decisions extract(const std::vector<double>& v) const {
    Decisions d;
    d.policy = "milp";
    d.boundaries.assign(L + 1, BoundaryPlacement{});
    d.resident.assign(L, false);
    d.keep_internals.assign(L, false);
    d.traffic.assign(L + 1, BoundaryTraffic{});
    d.lazy_optimizer = true;
    d.layer_optimizer.resize(L);
    auto clean = [](double a) { return a < kRoundOff ? 0.0 : a; };
    // Tier fractions below a millionth are solver round-off too (a time-limited solve
    // leaves them): their tens of bytes would move through chains whose order rows hold
    // only within the solver's tolerance. Dropping them moves a millionth of a boundary to
    // the other tiers, within the capacities' safety margin (a millionth, constructor).
    auto clean_tier = [](double a) { return a < kPartRoundOff ? 0.0 : a; };
    for (int b = 0; b < L; ++b) {
      bool stored = b == 0 || v[z[b]] > 0.5;
      if (!stored) {
        d.boundaries[b] = BoundaryPlacement{true, 0, 0, 0};
        continue;
      }
      double gg = clean_tier(v[g[b]]), cc = clean_tier(v[c[b]]), nn = clean_tier(v[n[b]]);
      double sum = gg + cc + nn;
      LT_ASSERT(sum > 0.5, "stored boundary without tiers");
      d.boundaries[b] = BoundaryPlacement{false, gg / sum, cc / sum, nn / sum};
      // Transfers, rescaled so each family moves exactly its part's bytes.
      // Pieces below a millionth of a boundary are round-off as well (tens of bytes, ten
      // times the solver's primal tolerance, that the order rows hold only within it): they
      // join the family's last piece, which every earlier link of its chain has completed.
      auto piece = [&](double gb) { return gb < kPartRoundOff * A ? 0.0 : gb; };
      auto fill = [&](std::vector<StageBytes>& out, const StageCols& cols, double part) {
        double tot = 0, kept = 0;
        for (auto [s, col] : cols) {
          tot += clean(v[col]);
          kept += piece(v[col]);
        }
        if (part <= 0 || tot <= 0) return;
        if (kept <= 0) kept = tot;  // all tiny: keep them (a tiny part)
        for (auto [s, col] : cols)
          if (piece(v[col]) > 0 || kept == tot) out.push_back({s, clean(v[col]) / tot * part * cm.boundary_bytes});
        double moved = 0;
        for (const StageBytes& x : out) moved += x.bytes;
        out.back().bytes += part * cm.boundary_bytes - moved;  // the round-off pieces, exactly
      };
      auto& tr = d.traffic[b];
      const auto& bp = d.boundaries[b];
      fill(tr.d2h_cpu, dc[b], bp.cpu);
      fill(tr.h2d_cpu, hc[b], bp.cpu);
      fill(tr.d2h_nvme, dn[b], bp.nvme);
      fill(tr.nvme_write, q[b], bp.nvme);
      fill(tr.nvme_read, r[b], bp.nvme);
      fill(tr.h2d_nvme, hn[b], bp.nvme);
      fetch_cpu_part_first(tr.h2d_cpu, tr.h2d_nvme, tr.d2h_cpu);
    }
    for (int j = 0; j < L; ++j) {
      d.resident[j] = v[y[j]] > 0.5;
      d.keep_internals[j] = v[k[j]] > 0.5;
    }
    auto fractions = [&](const StageCols& cols) {
      std::vector<StageFraction> out;
      double tot = 0;
      for (auto [s, col] : cols) tot += clean(v[col]);
      for (auto [s, col] : cols)
        if (clean(v[col]) > 0) out.push_back({s, clean(v[col]) / tot});
      return out;
    };
    for (int j = 0; j < L; ++j) d.layer_optimizer[j] = fractions(o[j]);
    d.head_optimizer = fractions(oh);
    auto chosen = [&](const StageCols& cols) {
      for (auto [s, col] : cols)
        if (v[col] > 0.5) return s;
      return -1;
    };
    d.forward_load.assign(L, -1);
    d.backward_load.assign(L, -1);
    d.grad_drain.assign(L, -1);
    for (int j = 0; j < L; ++j) {
      d.forward_load[j] = chosen(lf[j]);
      d.backward_load[j] = chosen(lb[j]);
      d.grad_drain[j] = chosen(gd[j]);
    }
    if (page) {
      d.paging_decided = true;
      d.state_read.assign(L, -1);
      d.state_write.assign(L, -1);
      for (int j = 1; j < L; ++j)
        if (v[pg[j]] > 0.5) {
          d.state_read[j] = chosen(rd[j]);
          d.state_write[j] = chosen(wr[j]);
        }
      d.master_paged.assign(L, false);
      d.grads_paged.assign(L, false);
      for (int j = 1; j < L; ++j) {
        if (d.state_read[j] < 0) continue;
        d.master_paged[j] = pm[j] >= 0 && v[pm[j]] > 0.5;
        d.grads_paged[j] = pgr[j] >= 0 && v[pgr[j]] > 0.5;
      }
      d.copy_paged.assign(L, false);
      for (int j = 0; j < L; ++j) d.copy_paged[j] = pc[j] >= 0 && v[pc[j]] > 0.5;
    }
    d.head_chunk_rows = hs >= 0 && v[hs] > 0.5 ? head_rows : 0;
    return d;
  }
};

}  // namespace

Plan plan_milp(const PlanRequest& req, const CostModel& cm, const MilpOptions& opt) {
  Milp milp(req, cm, opt);
  milp.columns();
  milp.rows();
  if (opt.fixed_structure) milp.fix_structure(*opt.fixed_structure);
  // The solve starts from the rule's transfer windows and paging (milp.starts()): the
  // MILP's plan is never worse than the rule's. With paging decided here, whose LP
  // relaxation is weak (a state moves whole, in one window), the starts go first.
  MipResult res = milp.m.solve(req.time_limit_s, req.target_gap, {}, milp.starts(), /*restricted_first=*/milp.page);
  Plan p;
  if (!res.has_solution) {
    fill_plan_header(p, req, cm, "milp", milp.paging.host_state_bytes, milp.paging.nvme_bytes());
    p.feasible = false;
    p.infeasible_reason = res.proven_infeasible ? "the MILP is infeasible under these budgets"
                                                : "no plan found within the time limit";
  } else {
    const Decisions d = milp.extract(res.x);
    p = build_plan(req, cm, d);
    evaluate_plan(p);
    auto problems = capacity_problems(p);
    p.feasible = problems.empty();
    if (!p.feasible) p.infeasible_reason = problems.front();
    if (p.feasible && d.head_chunk_rows > 0) p = settle_head(req, cm, d, std::move(p));
  }
  p.solve.solve_s = res.seconds;
  p.solve.solve_cpu_s = res.cpu_seconds;
  p.solve.mip_gap = res.gap;
  p.solve.objective_s = res.objective;
  p.solve.bound_s = res.bound;
  p.solve.status = res.proven_infeasible ? "infeasible"
                   : !res.has_solution   ? "no_solution"
                   : res.proven_optimal  ? "optimal"
                   : res.time_limit      ? "time_limit"
                                         : "gap";
  p.solve.columns = milp.m.num_cols();
  p.solve.rows = milp.m.num_rows();
  return p;
}

}  // namespace lt
