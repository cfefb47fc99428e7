#include "plan/plan_memory.h"

#include <cmath>

namespace lt {
namespace {

size_t whole_bytes(double bytes) { return static_cast<size_t>(std::llround(bytes)); }

}  // namespace

ArenaSizes plan_arena_sizes(const CostModel& cm, int64_t head_chunk_rows) {
  ArenaSizes a;
  a.boundary_token = whole_bytes(cm.boundary_bytes / static_cast<double>(cm.tokens));
  for (const LayerCost& l : cm.layers) a.saved.push_back(whole_bytes(l.internals_bytes));
  a.scratch.layer = whole_bytes(cm.layer_scratch_bytes);
  a.scratch.head = whole_bytes(cm.head_scratch_bytes);
  // Every profile's plan counts the weight and gradient slots; an executor whose compute
  // tier is the host's memory reads the weights in place and holds less.
  const HeadFootprint head = cm.head_footprint(head_chunk_rows);
  ComputeTierWeights& w = a.weights;
  w.on_compute = true;
  w.layer_bytes = whole_bytes(cm.slot_weight_bytes());
  w.layer_grad_bytes = whole_bytes(cm.slot_grad_bytes());
  w.norm_bytes = whole_bytes(head.norm_buffer_bytes);
  w.norm_grad_bytes = whole_bytes(head.norm_grad_bytes);
  const double rows = static_cast<double>(head_chunk_rows > 0 ? head_chunk_rows : cm.vocab_size);
  w.lm_head_bytes = whole_bytes(rows * head.row_weight_bytes);
  w.lm_head_grad_bytes = whole_bytes(rows * head.row_grad_bytes);
  return a;
}

void lay_out_plan_memory(Plan& p, const CostModel& cm) {
  const StreamSchedule s = make_stream_schedule(p, plan_arena_sizes(cm, p.head_chunk_rows));
  for (Window& w : p.windows) {
    w.alloc.clear();
    w.free.clear();
    w.workspace_bytes = 0;  // the window's workspace is its ws.<window> request
  }
  for (const ArenaRequest& r : s.arena) {
    p.windows[r.first_window].alloc.push_back({r.name, static_cast<double>(r.bytes)});
    p.windows[r.last_window].free.push_back({r.name, static_cast<double>(r.bytes)});
  }
}

}  // namespace lt
