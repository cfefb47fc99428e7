// A small mixed-integer model builder over COIN-OR CBC's C API (coin/Cbc_C_Interface.h).
// It guards the pitfalls measured with Debian's CBC 2.10 (shared/REFERENCE.md, section 3):
//  - duplicate column indices in a row are merged here (Cbc_addRow would keep both);
//  - every column gets a unique name (MIP starts are honoured only then);
//  - the caller scales coefficients (GB and seconds, never bytes);
//  - the time limit is passed shortened, because CBC overran its limit by ~30%.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace lt {

struct MipResult {
  bool has_solution = false;
  bool proven_optimal = false;  // optimal within the asked relative gap
  bool proven_infeasible = false;
  bool time_limit = false;
  double objective = 0;
  double bound = 0;  // best possible objective (lower bound, minimization)
  double gap = 0;    // (objective - bound) / |objective|
  double seconds = 0;      // wall clock
  double cpu_seconds = 0;  // process CPU time (CBC runs on one thread)
  std::vector<double> x;
};

class MipModel {
 public:
  using Terms = std::vector<std::pair<int, double>>;

  int add_col(const std::string& name, double lb, double ub, double obj, bool integer);
  // lb <= sum terms <= ub (use +-inf for one-sided rows). Merges duplicate columns.
  void add_row(const std::string& name, const Terms& terms, double lb, double ub);
  void set_obj(int col, double obj) { obj_[col] = obj; }
  void set_lb(int col, double lb) { lb_[col] = lb; }
  void fix(int col, double v) { lb_[col] = ub_[col] = v; }
  int num_cols() const { return static_cast<int>(lb_.size()); }
  int num_rows() const { return static_cast<int>(row_lb_.size()); }

  // Minimizes. `start` (optional): values for some columns (index, value) as a MIP start.
  // `restricted` (optional): sets of columns fixed to values, each making a rule the
  // full model generalizes. The restricted models are solved to a first incumbent (the
  // first may take all the time left, the others share 60% of what it leaves) first when
  // `restricted_first`, else only when the full model's first incumbent is not within
  // the gap; the full branch-and-bound then
  // starts from the best incumbent. The result is never worse than the rules' first
  // incumbents (for the models here usually within the gap of the rule's optimum).
  // Bounds and gaps are the full model's.
  MipResult solve(double time_limit_s, double rel_gap, const std::vector<std::pair<int, double>>& start = {},
                  const std::vector<std::vector<std::pair<int, double>>>& restricted = {},
                  bool restricted_first = false) const;

 private:
  std::vector<std::string> names_;
  std::vector<double> lb_, ub_, obj_;
  std::vector<bool> integer_;
  std::vector<std::string> row_names_;
  std::vector<double> row_lb_, row_ub_;
  std::vector<Terms> rows_;
};

}  // namespace lt
