#include "plan/mip_model.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <coin/Cbc_C_Interface.h>

#include "core/error.h"

namespace lt {
namespace {

// CBC overran its limit by ~30% in measurements; ask for 75% of the budget.
constexpr double kTimeLimitShare = 0.75;
// The restricted starts' share of the time left (MipModel::solve): each costs one LP
// solve of about the full model's size, and the full branch-and-bound needs another.
constexpr double kRestrictedShare = 0.6;
// Coefficients below this are dropped: with GB and seconds as units they are round-off.
constexpr double kDropCoefficient = 1e-12;

}  // namespace

int MipModel::add_col(const std::string& name, double lb, double ub, double obj, bool integer) {
  names_.push_back(name);
  lb_.push_back(lb);
  ub_.push_back(ub);
  obj_.push_back(obj);
  integer_.push_back(integer);
  return static_cast<int>(lb_.size()) - 1;
}

void MipModel::add_row(const std::string& name, const Terms& terms, double lb, double ub) {
  std::map<int, double> merged;
  for (auto [c, v] : terms) {
    LT_ASSERT(c >= 0 && c < num_cols(), "row " + name + ": bad column");
    merged[c] += v;
  }
  Terms t;
  for (auto [c, v] : merged)
    if (std::fabs(v) > kDropCoefficient) t.emplace_back(c, v);
  row_names_.push_back(name);
  row_lb_.push_back(lb);
  row_ub_.push_back(ub);
  rows_.push_back(std::move(t));
}

namespace {

struct CbcDeleter {
  void operator()(Cbc_Model* m) const { Cbc_deleteModel(m); }
};
using CbcPtr = std::unique_ptr<Cbc_Model, CbcDeleter>;

void apply_env_parameters(Cbc_Model* m) {
  const char* extra = std::getenv("LT_CBC_PARAMS");  // "name=value,name=value" for tuning
  if (!extra) return;
  std::string all(extra);
  size_t pos = 0;
  while (pos < all.size()) {
    size_t comma = all.find(',', pos);
    std::string item = all.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t eq = item.find('=');
    if (eq != std::string::npos) Cbc_setParameter(m, item.substr(0, eq).c_str(), item.substr(eq + 1).c_str());
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
}

double cpu_seconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

}  // namespace

MipResult MipModel::solve(double time_limit_s, double rel_gap, const std::vector<std::pair<int, double>>& start,
                          const std::vector<std::vector<std::pair<int, double>>>& restricted,
                          bool restricted_first) const {
  const int nc = num_cols(), nr = num_rows();
  {
    std::set<std::string> unique(names_.begin(), names_.end());
    LT_ASSERT(static_cast<int>(unique.size()) == nc, "column names must be unique");
  }
  // Column-major matrix for Cbc_loadProblem.
  std::vector<std::vector<std::pair<int, double>>> cols(nc);
  for (int r = 0; r < nr; ++r)
    for (auto [c, v] : rows_[r]) cols[c].emplace_back(r, v);
  std::vector<CoinBigIndex> starts(nc + 1, 0);
  std::vector<int> index;
  std::vector<double> value;
  for (int c = 0; c < nc; ++c) {
    for (auto [r, v] : cols[c]) {
      index.push_back(r);
      value.push_back(v);
    }
    starts[c + 1] = static_cast<CoinBigIndex>(index.size());
  }
  const double inf = std::numeric_limits<double>::infinity();
  const double big = std::numeric_limits<double>::max();
  std::vector<double> rlb(row_lb_), rub(row_ub_), clb(lb_), cub(ub_);
  for (double& v : rlb) if (v == -inf) v = -big;
  for (double& v : rub) if (v == inf) v = big;
  for (double& v : cub) if (v == inf) v = big;
  const char* log = std::getenv("LT_CBC_LOG");  // LT_CBC_LOG=1 shows CBC's progress
  const int log_level = log ? std::atoi(log) : 0;
  if (log_level > 1) {  // nonzeros per row family, to find what bloats the matrix
    std::map<std::string, std::pair<int, long>> fam;
    for (int r = 0; r < nr; ++r) {
      auto key = row_names_[r].substr(0, row_names_[r].find('_', row_names_[r].find('_') + 1));
      fam[key].first++;
      fam[key].second += static_cast<long>(rows_[r].size());
    }
    for (auto& [k, v] : fam) std::fprintf(stderr, "rows %-20s %6d nnz %8ld\n", k.c_str(), v.first, v.second);
  }
  auto make = [&](double seconds, const std::vector<double>& lo, const std::vector<double>& hi) {
    CbcPtr m(Cbc_newModel());
    Cbc_loadProblem(m.get(), nc, nr, starts.data(), index.data(), value.data(), lo.data(), hi.data(), obj_.data(),
                    rlb.data(), rub.data());
    for (int c = 0; c < nc; ++c) {
      Cbc_setColName(m.get(), c, names_[c].c_str());
      if (integer_[c]) Cbc_setInteger(m.get(), c);
    }
    for (int r = 0; r < nr; ++r) Cbc_setRowName(m.get(), r, row_names_[r].c_str());
    Cbc_setObjSense(m.get(), 1);
    Cbc_setLogLevel(m.get(), log_level);
    Cbc_setMaximumSeconds(m.get(), std::max(0.05, seconds * kTimeLimitShare));
    Cbc_setAllowableFractionGap(m.get(), rel_gap);
    // Clp perturbs degenerate LPs by default, and these are degenerate (identical layers,
    // transfer families summing to the same bytes): measured, its perturbed root LP and the
    // primal clean-up after it took twice as long (27B H800 case: 2.2 -> 1.0 s, the same
    // plan; 70B H200 2.8 -> 1.7 s).
    Cbc_setParameter(m.get(), "perturbation", "off");
    if (const char* f = std::getenv("LT_CBC_WRITE_LP")) Cbc_writeLp(m.get(), f);  // for inspecting a model
    return m;
  };
  auto read = [&](Cbc_Model* m, MipResult& res) {
    res.proven_infeasible = Cbc_isProvenInfeasible(m);
    res.proven_optimal = Cbc_isProvenOptimal(m);
    res.time_limit = Cbc_isSecondsLimitReached(m);
    const double* sol = Cbc_getColSolution(m);
    // A solution exists when CBC kept one (an incumbent), not merely an LP point.
    res.has_solution = !res.proven_infeasible && sol != nullptr && (Cbc_numberSavedSolutions(m) > 0 || res.proven_optimal);
    if (res.has_solution) {
      res.x.assign(sol, sol + nc);
      res.objective = Cbc_getObjValue(m);
      res.bound = std::min(res.objective, Cbc_getBestPossibleObjValue(m));
      res.gap = res.objective != 0 ? std::max(0.0, (res.objective - res.bound) / std::fabs(res.objective)) : 0;
    }
  };
  auto set_start = [&](Cbc_Model* m, const std::vector<std::pair<int, double>>& st) {
    if (st.empty()) return;
    std::vector<const char*> nm;
    std::vector<double> val;
    for (auto [c, v] : st) {
      nm.push_back(names_[c].c_str());
      val.push_back(v);
    }
    Cbc_setMIPStart(m, static_cast<int>(nm.size()), nm.data(), val.data());
  };
  auto whole = [&](const std::vector<double>& x) {
    std::vector<std::pair<int, double>> v;
    for (int c = 0; c < nc; ++c) v.emplace_back(c, x[c]);
    return v;
  };

  auto t0 = std::chrono::steady_clock::now();
  const double c0 = cpu_seconds();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  auto gap_of = [](MipResult& r) {
    r.gap = r.objective != 0 ? std::max(0.0, (r.objective - r.bound) / std::fabs(r.objective)) : 0;
  };
  // Phase 1: stop at the first incumbent, without CBC's preprocessing. For these models the
  // feasibility pump's first solution is usually within the target gap of the root bound,
  // and CBC would otherwise spend seconds on further pump rounds before checking the gap.
  auto first_incumbent = [&](const std::vector<double>& lo, const std::vector<double>& hi, double limit,
                             const std::vector<std::pair<int, double>>& from) {
    MipResult res;
    CbcPtr m = make(limit, lo, hi);
    Cbc_setParameter(m.get(), "preprocess", "off");
    Cbc_setMaximumSolutions(m.get(), 1);
    apply_env_parameters(m.get());
    set_start(m.get(), from);
    Cbc_solve(m.get());
    read(m.get(), res);
    return res;
  };
  // Phase 2: a full branch-and-bound from an incumbent (when there is one), kept unless it
  // finds better; the bound is the best either proved.
  auto branch_and_bound = [&](const std::vector<double>& lo, const std::vector<double>& hi, double limit,
                              MipResult res, bool preprocess) {
    CbcPtr m = make(limit, lo, hi);
    if (!preprocess) Cbc_setParameter(m.get(), "preprocess", "off");
    apply_env_parameters(m.get());
    if (res.has_solution) set_start(m.get(), whole(res.x));
    Cbc_solve(m.get());
    MipResult second;
    read(m.get(), second);
    if (!res.has_solution) return second;
    if (second.has_solution && second.objective <= res.objective + 1e-12) {
      second.bound = std::max(second.bound, res.bound);
      gap_of(second);
      return second;
    }
    if (second.has_solution || second.proven_optimal) res.bound = std::max(res.bound, second.bound);
    gap_of(res);
    return res;
  };
  auto done = [&](MipResult& r) { return r.has_solution && !r.proven_optimal && r.gap > rel_gap; };
  // The phases' budgets count CPU seconds, as CBC's limits do: the same split of the work
  // on a busy machine as on an idle one (and the same plans).
  auto cpu_left = [&] { return time_limit_s - (cpu_seconds() - c0); };
  auto trace = [&](const char* what, const MipResult& r) {  // LT_CBC_LOG=1: the phases
    if (log_level > 0)
      std::fprintf(stderr, "lazytrain mip: %s at %.2f s: %s objective %.6g bound %.6g\n", what, elapsed(),
                   r.has_solution ? "solution" : "no solution", r.objective, r.bound);
  };

  // The restricted models (a rule each): each one's first incumbent (the full model's
  // branch-and-bound refines the best). Their bounds are no bounds of the full model.
  auto rule_incumbent = [&] {
    MipResult best;
    for (size_t i = 0; i < restricted.size(); ++i) {
      std::vector<double> rlo(clb), rhi(cub);
      for (auto [c, v] : restricted[i]) {
        LT_ASSERT(c >= 0 && c < nc && v >= lb_[c] && v <= ub_[c], "restricted column " + std::to_string(c));
        rlo[c] = rhi[c] = v;
      }
      // The first (today's rule: the guarantee, and a feasibility probe's answer) may take
      // all the time left; the others split kRestrictedShare of what it leaves.
      const double share = i == 0 ? cpu_left() : kRestrictedShare * cpu_left() / double(restricted.size() - i);
      MipResult rule = first_incumbent(rlo, rhi, share, start);
      trace("restricted start", rule);
      if (rule.has_solution && (!best.has_solution || rule.objective < best.objective)) best = std::move(rule);
    }
    best.proven_optimal = best.proven_infeasible = false;
    best.bound = 0;  // the objective (a step time) is never negative
    if (best.has_solution) gap_of(best);
    return best;
  };
  // CBC's preprocessing has declared a full model infeasible with a feasible start: the
  // full branch-and-bound after a restricted solve runs without it.
  MipResult res;
  if (restricted.empty()) {
    res = first_incumbent(clb, cub, time_limit_s, start);
    const double left = cpu_left();
    if ((done(res) || (!res.has_solution && !res.proven_infeasible)) && left > 0.5)
      res = branch_and_bound(clb, cub, left, std::move(res), true);
  } else if (restricted_first) {
    res = rule_incumbent();
    const double left = cpu_left();
    if ((done(res) || !res.has_solution) && left > 0.5) res = branch_and_bound(clb, cub, left, std::move(res), false);
  } else {
    res = first_incumbent(clb, cub, time_limit_s, start);
    if (!res.proven_infeasible && (!res.has_solution || (!res.proven_optimal && res.gap > rel_gap))) {
      // Not within the gap at once: the full branch-and-bound starts from the better of
      // this incumbent and the rules'.
      const double full_bound = res.has_solution ? res.bound : 0;
      MipResult rule = rule_incumbent();
      if (rule.has_solution && (!res.has_solution || rule.objective < res.objective)) {
        rule.bound = std::min(rule.objective, full_bound);
        gap_of(rule);
        res = std::move(rule);
      }
      const double left = cpu_left();
      if ((done(res) || !res.has_solution) && left > 0.5) res = branch_and_bound(clb, cub, left, std::move(res), false);
    }
  }
  trace("done", res);
  if (res.has_solution && res.gap <= rel_gap) res.proven_optimal = true;  // within the asked gap
  res.seconds = elapsed();
  res.cpu_seconds = cpu_seconds() - c0;
  return res;
}

}  // namespace lt
