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

using Terms = MipModel::Terms;
using StageCols = std::map<int, int>;  // stage -> column

struct Range {
  int lo = 0, hi = -1;
  bool empty() const { return hi < lo; }
};

struct Milp {
  const PlanRequest& req;
  const CostModel& cm;
  const MilpOptions& opt;
  int L;
  Stages st;
  StatePaging paging;
  std::vector<double> state_nvme_s;  // per stage: NVMe seconds of paged optimizer states
  MipModel m;

  // Scaled constants.
  double A, W, Wg, Wh, Wgh, I, wsf, wsb, wsh;
  double bh, bd, bnr, bnw;
  double F, Bw, H, to, toh, toe;
  double capG, capC, capN, capStage;
  bool use_cpu = false, use_nvme = false;

  std::vector<int> t;                 // per stage
  std::map<std::pair<int, int>, int> x;
  std::vector<int> z, g, c, n, y, k;  // z[0], z[L] are -1 (constant 1)
  std::vector<StageCols> dc, dn, q, r, hc, hn, o;
  StageCols oh;
  std::vector<Range> rdoff, rq, rr, rh;
  std::vector<bool> nvme_possible;  // the NVMe chain fits in boundary b's stage ranges

  Milp(const PlanRequest& rq_, const CostModel& cm_, const MilpOptions& o_)
      : req(rq_),
        cm(cm_),
        opt(o_),
        L(cm_.num_layers),
        st{cm_.num_layers},
        paging(plan_state_paging(rq_, cm_, /*lazy_optimizer=*/true)) {
    A = cm.boundary_bytes / kGB;
    W = cm.weight_bytes / kGB;
    Wg = cm.grad_bytes / kGB;
    Wh = cm.head_weight_bytes / kGB;
    Wgh = cm.head_grad_bytes / kGB;
    I = cm.internals_bytes / kGB;
    wsf = cm.workspace_forward / kGB;
    wsb = cm.workspace_backward / kGB;
    wsh = cm.workspace_head / kGB;
    bh = cm.h2d_bw / kGB;
    bd = cm.d2h_bw / kGB;
    bnr = cm.nvme_read_bw / kGB;
    bnw = cm.nvme_write_bw / kGB;
    F = cm.forward_s;
    Bw = cm.backward_s;
    H = cm.head_s;
    to = cm.optimizer_layer_s;
    toh = cm.optimizer_head_s;
    toe = cm.optimizer_embed_s;
    double fixed = 2 * cm.weight_bytes + 2 * cm.grad_bytes;
    // Capacities shrink by a millionth, and by 128 bytes, so that solver round-off (primal
    // tolerance ~1e-7 on GB-scaled rows: ~100 bytes absolute) never lets the extracted plan
    // exceed a budget by a few bytes, however small the budget.
    constexpr double kSafety = 1 - 1e-6;
    constexpr double kSafetyBytes = 128;
    auto shrink = [&](double bytes) { return std::max(0.0, bytes * kSafety - kSafetyBytes); };
    capG = (shrink(req.gpu_cap()) - fixed) / kGB;
    capC = shrink(req.cpu_budget(paging.host_state_bytes)) / kGB;
    capN = shrink(req.nvme_budget(paging.nvme_bytes())) / kGB;
    capStage = std::max(0.0, req.hardware.host_memory_bytes * kSafety - paging.host_state_bytes) / kGB - capC;
    // Paged optimizer states: fixed NVMe time in their read and write stages.
    state_nvme_s.assign(st.count(), 0);
    for (int j = 0; j < L; ++j) {
      if (!paging.on_nvme[j]) continue;
      state_nvme_s[StatePaging::read_stage(st, j)] += paging.layer_bytes / cm.nvme_read_bw;
      state_nvme_s[StatePaging::write_stage(st, j)] += paging.layer_bytes / cm.nvme_write_bw;
    }
    // A tier smaller than a millionth of a boundary cannot hold anything useful.
    use_cpu = capC > 1e-6 * A;
    use_nvme = capN > 1e-6 * A && capStage > 1e-6 * A;
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
    const double scale = L * (2 * F + Bw) + H;
    const double eps = kPerturbation * scale;
    t.resize(st.count());
    for (int w = 0; w < st.count(); ++w) t[w] = m.add_col("t_" + sn(w), 0, kInf, 1.0, false);
    const double rc_window = std::max(F, W / bh);
    for (int s = 0; s < L; ++s)
      for (int e = s + 1; e <= std::min(L, s + opt.max_block); ++e)
        x[{s, e}] = m.add_col("x_" + std::to_string(s) + "_" + std::to_string(e), 0, 1, (e - s - 1) * rc_window, true);
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
      if (paging.on_nvme[j]) {  // between its state's read and write (state_paging.h)
        const int u = StatePaging::update_stage(st, j);
        o[j][u] = m.add_col("o_" + js + "_" + sn(u), 0, 1, 0, false);
        continue;
      }
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
  }

  // Sum over boundaries of a transfer family at one stage.
  Terms family_at(const std::vector<StageCols>& fam, int w, double coef) const {
    Terms out;
    for (int b = 0; b < L; ++b) at_stage(out, fam[b], w, coef);
    return out;
  }
  static void append(Terms& a, const Terms& b) { a.insert(a.end(), b.begin(), b.end()); }

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
    auto host_terms = [&](int w) {
      Terms tt;
      for (int j = 0; j < L; ++j) at_stage(tt, o[j], w, to);
      at_stage(tt, oh, w, toh);
      return tt;
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
      return tt;
    };
    // P0: the embedding's update, and whatever the plan runs there.
    link_row("host", st.p0(), host_terms(st.p0()), toe);
    // P1: layer 0 and the embedded input.
    lower(st.p1(), (W + A) / bh);
    lower(st.p1(), state_nvme_s[st.p1()]);
    link_row("host", st.p1(), host_terms(st.p1()), 0);
    for (int j = 0; j < L; ++j) {
      int w = st.forward(j);
      lower(w, F);
      lower(w, (j + 1 < L ? W : Wh) / bh);  // the next layer's weights, or the head's
      link_row("d2h", w, d2h_terms(w), 0);
      link_row("nvme", w, nvme_terms(w), state_nvme_s[w]);
      link_row("host", w, host_terms(w), 0);
    }
    {
      int w = st.head();
      lower(w, H);
      Terms h2d = h2d_terms(w);
      h2d.emplace_back(y[L - 1], -W / bh);
      link_row("h2d", w, h2d, W / bh);
      link_row("d2h", w, d2h_terms(w), Wgh / bd);
      link_row("nvme", w, nvme_terms(w), 0);
    }
    for (int j = L - 1; j >= 0; --j) {
      int w = st.backward(j);
      link_row("compute", w, {{k[j], -F}}, Bw + F);
      Terms h2d = h2d_terms(w);
      double constant = 0;
      if (j >= 1) {
        h2d.emplace_back(y[j - 1], -W / bh);
        constant = W / bh;
      }
      link_row("h2d", w, h2d, constant);
      lower(w, j + 1 < L ? Wg / bd : 0);
      link_row("nvme", w, nvme_terms(w), 0);
    }
    lower(st.epilogue(), (Wg + A) / bd);
    for (int w = 0; w < st.count(); ++w) m.set_lb(t[w], lb_[w]);
  }
  std::vector<double> lb_;

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
        constant -= A + Wh;
        append(tt, family_at(dc, w, -1));
        append(tt, family_at(dn, w, -1));
      } else {  // backward slot j: everything of boundary j, resident weights, internals
        int j = st.backward_layer(w);
        for (int col : {g[j], c[j], n[j]}) tt.emplace_back(col, -A);
        tt.emplace_back(y[j], -W);
        tt.emplace_back(k[j], -I);
        if (j == L - 1) constant -= Wgh;  // the head's gradient slot, drained
      }
    };
    for (int w = first; w <= last; ++w) {
      // live[w] - live[w-1] - allocs(w) + frees(w-1) = 0  (constants moved to the bounds)
      Terms tt{{live[w], 1}};
      double constant = 0;  // allocations that do not depend on decisions
      if (w == st.p1()) {
        constant += A;
        tt.emplace_back(y[0], -W);
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
          if (j + 1 < L) tt.emplace_back(y[j + 1], -W);
          if (j + 1 == L) constant += Wh;  // the head's weights, prefetched
          if (j >= 1) tt.emplace_back(k[j - 1], -I);
        } else if (w == st.head()) {
          constant += Wgh;  // the head's gradient slot
          tt.emplace_back(k[L - 1], -I);
        }
        append(tt, family_at(hc, w, -1));
        append(tt, family_at(hn, w, -1));
      }
      m.add_row("live_def_" + sn(w), tt, constant, constant);
      // Capacity: live bytes + workspace (+ recomputed boundaries in backward) <= cap.
      double ws = w == st.p1() ? 0 : w < st.head() ? wsf : w == st.head() ? wsh : wsb;
      Terms cap{{live[w], 1}};
      if (w > st.head()) {
        int j = st.backward_layer(w);
        for (auto& [se, col] : x)
          if (se.first < j && j < se.second) cap.emplace_back(col, (j - se.first) * A);
      }
      m.add_row("mem_" + sn(w), cap, -kInf, capG - ws);
    }
    if (A > capG) m.add_row("mem_E", {{t[st.epilogue()], 0}}, 1, 0);  // infeasible: E alone does not fit
  }

  // Host memory for activations: the cpu parts are reserved for the whole step and bounded
  // by the host activation budget; NVMe-bound bytes are staged in host memory from their
  // D2H (or NVMe read) until their NVMe write (or H2D) has completed, bounded by what the
  // host has left beyond its state and the activation budget. Telescoped like the
  // compute tier.
  void host_rows() {
    Terms base;
    for (int b = 0; b < L; ++b) base.emplace_back(c[b], A);
    m.add_row("host_budget", base, -kInf, capC);
    if (!use_nvme) return;
    Terms nv;
    for (int b = 0; b < L; ++b) nv.emplace_back(n[b], A);
    m.add_row("nvme_budget", nv, -kInf, capN);
    int prev = -1;
    for (int w = st.forward(0); w < st.epilogue(); ++w) {
      int stg = m.add_col("staging_" + sn(w), 0, capStage, 0, false);
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
    for (int b = 0; b < L; ++b) {
      bool stored = b == 0 || v[z[b]] > 0.5;
      if (!stored) {
        d.boundaries[b] = BoundaryPlacement{true, 0, 0, 0};
        continue;
      }
      double gg = clean(v[g[b]]), cc = clean(v[c[b]]), nn = clean(v[n[b]]);
      double sum = gg + cc + nn;
      LT_ASSERT(sum > 0.5, "stored boundary without tiers");
      d.boundaries[b] = BoundaryPlacement{false, gg / sum, cc / sum, nn / sum};
      // Transfers, rescaled so each family moves exactly its part's bytes.
      auto fill = [&](std::vector<StageBytes>& out, const StageCols& cols, double part) {
        double tot = 0;
        for (auto [s, col] : cols) tot += clean(v[col]);
        if (part <= 0 || tot <= 0) return;
        for (auto [s, col] : cols)
          if (clean(v[col]) > 0) out.push_back({s, clean(v[col]) / tot * part * cm.boundary_bytes});
      };
      auto& tr = d.traffic[b];
      const auto& bp = d.boundaries[b];
      fill(tr.d2h_cpu, dc[b], bp.cpu);
      fill(tr.h2d_cpu, hc[b], bp.cpu);
      fill(tr.d2h_nvme, dn[b], bp.nvme);
      fill(tr.nvme_write, q[b], bp.nvme);
      fill(tr.nvme_read, r[b], bp.nvme);
      fill(tr.h2d_nvme, hn[b], bp.nvme);
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
    return d;
  }
};

}  // namespace

Plan plan_milp(const PlanRequest& req, const CostModel& cm, const MilpOptions& opt) {
  Milp milp(req, cm, opt);
  milp.columns();
  milp.rows();
  MipResult res = milp.m.solve(req.time_limit_s, req.target_gap);
  Plan p;
  if (!res.has_solution) {
    fill_plan_header(p, req, cm, "milp", milp.paging.host_state_bytes, milp.paging.nvme_bytes());
    p.feasible = false;
    p.infeasible_reason = res.proven_infeasible ? "the MILP is infeasible under these budgets"
                                                : "no plan found within the time limit";
  } else {
    p = build_plan(req, cm, milp.extract(res.x));
    evaluate_plan(p);
    auto problems = capacity_problems(p);
    p.feasible = problems.empty();
    if (!p.feasible) p.infeasible_reason = problems.front();
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
