#include "plan/default_schedule.h"

#include "core/error.h"
#include "plan/plan_stages.h"

namespace lt {

Decisions all_gpu_decisions(int L, const std::string& policy) {
  Decisions d;
  d.policy = policy;
  d.boundaries.assign(L + 1, BoundaryPlacement{});
  d.resident.assign(L, false);
  d.keep_internals.assign(L, false);
  d.traffic.assign(L + 1, BoundaryTraffic{});
  d.lazy_optimizer = true;
  Stages st{L};
  d.layer_optimizer.resize(L);
  for (int k = 0; k < L; ++k) {
    int stage = k == 0 ? st.p0() : k == 1 ? st.p1() : st.forward(k - 2);
    d.layer_optimizer[k] = {{stage, 1.0}};
  }
  // The head's update finishes before F{L-1} prefetches its weights.
  d.head_optimizer = {{L >= 2 ? st.forward(L - 2) : st.p1(), 1.0}};
  return d;
}

int reload_deadline_stage(const std::vector<BoundaryPlacement>& b, int boundary) {
  const int L = static_cast<int>(b.size()) - 1;
  Stages st{L};
  int e = boundary + 1;
  while (e < L && b[e].recompute) ++e;
  return e == L ? st.head() : st.backward(e);
}

bool asap_nvme_possible(const std::vector<BoundaryPlacement>& b, int boundary) {
  Stages st{static_cast<int>(b.size()) - 1};
  int write = st.forward(boundary) + 1;
  int read = reload_deadline_stage(b, boundary) - 1;
  return read > write;
}

bool assign_asap_traffic(Decisions& d, const CostModel& cm) {
  const int L = cm.num_layers;
  Stages st{L};
  const double A = cm.boundary_bytes;
  d.traffic.assign(L + 1, BoundaryTraffic{});
  bool ok = true;
  for (int b = 0; b < L; ++b) {
    const auto& bp = d.boundaries[b];
    if (bp.recompute) continue;
    auto& t = d.traffic[b];
    int out = st.forward(b);
    int back = reload_deadline_stage(d.boundaries, b);
    if (bp.cpu > 0) {
      t.d2h_cpu = {{out, A * bp.cpu}};
      t.h2d_cpu = {{back, A * bp.cpu}};
    }
    if (bp.nvme > 0) {
      if (!asap_nvme_possible(d.boundaries, b)) {
        ok = false;
        continue;
      }
      t.d2h_nvme = {{out, A * bp.nvme}};
      t.nvme_write = {{out + 1, A * bp.nvme}};
      t.nvme_read = {{back - 1, A * bp.nvme}};
      t.h2d_nvme = {{back, A * bp.nvme}};
    }
  }
  return ok;
}

}  // namespace lt
