// Memory of a timed event graph (sim/event_simulator_graph.h): each compute-tier
// allocation of the plan as a span from the event that first fills it to the end of its
// last use, each offloaded piece's host bytes from its arrival until it has gone on, and
// the peaks swept from them (the rules are listed in sim/event_simulator.h).
#include <algorithm>

#include "sim/event_simulator_graph.h"

namespace lt::event_sim {

double sweep_peak(const std::vector<LiveSpan>& spans, double base, std::vector<std::pair<double, double>>* curve) {
  std::vector<std::pair<double, double>> d;
  for (const LiveSpan& s : spans)
    if (s.to > s.from && s.bytes != 0) {
      d.emplace_back(s.from, s.bytes);
      d.emplace_back(s.to, -s.bytes);
    }
  std::sort(d.begin(), d.end());  // at equal times the negative deltas first
  double cur = base, peak = base;
  if (curve) curve->emplace_back(0, base);
  for (auto [t, v] : d) {
    cur += v;
    peak = std::max(peak, cur);
    if (curve) curve->emplace_back(t, cur);
  }
  return peak;
}

// The last compute that reads boundary b in backward (B{b}); -1 if none.
int EventGraph::last_backward_reader(int b) const {
  int last = -1;
  for (size_t c = 0; c < ops_.size(); ++c) {
    const Window& w = p_.windows[ops_[c].window];
    if (ops_[c].lane == SimLane::Compute && w.layer == b &&
        (w.kind == WindowKind::Recompute || w.kind == WindowKind::Backward))
      last = static_cast<int>(c);
  }
  return last;
}

// The first copy over `l` issued in window w or later of `tensor` (or, with prefix_match,
// of any tensor named tensor.<...> too).
int EventGraph::transfer_from(const std::string& tensor, Link l, int w, bool prefix_match) const {
  const std::string dotted = tensor + ".";
  for (auto [id, t] : transfers_)
    if (t->link == l && ops_[id].window >= w && (t->tensor == tensor || (prefix_match && starts_with(t->tensor, dotted.c_str()))))
      return id;
  return -1;
}

void EventGraph::memory(EventSimResult& r) {
  for (const Window& w : p_.windows)
    for (const MemOp& m : w.alloc)
      if (starts_with(m.tensor, "g.") && number_after(m.tensor, 2) >= 0) allocates_grad_slots_ = true;
  for (size_t w = 0; w < p_.windows.size(); ++w)
    for (const MemOp& m : p_.windows[w].alloc)
      if (m.bytes > 0) gpu_span(r, static_cast<int>(w), m);
  for (size_t w = 0; w < p_.windows.size(); ++w)
    if (first_compute_[w] >= 0 && p_.windows[w].workspace_bytes > 0)
      r.gpu_spans.push_back({p_.windows[w].name + " workspace", p_.windows[w].workspace_bytes,
                             ops_[first_compute_[w]].start, ops_[last_compute_[w]].end});
  r.peak.gpu = sweep_peak(r.gpu_spans, p_.fixed_gpu_bytes, &r.gpu_memory);
  host_spans(r);
  r.peak.cpu = sweep_peak(r.host_spans, p_.host_state_bytes, nullptr);
  for (auto [id, t] : transfers_)
    if (t->link == Link::NvmeWrite) r.peak.nvme += t->bytes;
}

// A compute-tier allocation of the plan, timed by the events that fill and read it.
void EventGraph::gpu_span(EventSimResult& r, int w, const MemOp& m) {
  const double step = r.step_s;
  const int L = p_.num_layers;
  auto span = [&](double from, double to) { r.gpu_spans.push_back({m.tensor, m.bytes, from, std::max(from, to)}); };
  auto start_of = [&](int op) { return op < 0 ? 0.0 : ops_[op].start; };
  const std::string& x = m.tensor;
  int b = -1, j = -1;
  std::string part;
  if (arena_span(r, w, m)) return;
  if (x == "w.head" || x == "w.norm" || x == "w.lm_head" || starts_with(x, "w.lm_head.")) {
    // The head's weights: whole, or the final norm and two chunk slots (w.head before
    // version 3)
    span(start_of(transfer_from("w.head", Link::H2D, w, true)), end_or(head_last_, step));
  } else if (x == "g.head" || x == "g.norm" || x == "g.lm_head" || starts_with(x, "g.lm_head.")) {
    // Its gradients: whole (streaming out from HEAD's start), or two chunk slots
    const int from = head_backward_.empty() ? head_first_ : head_backward_.front();
    int drained = -1;
    for (auto [id, t] : transfers_)
      if (t->link == Link::D2H && (t->tensor == "g.head" || starts_with(t->tensor, "g.head."))) drained = id;
    span(start_of(from), end_or(drained, step));
  } else if (starts_with(x, "w.") && (j = number_after(x, 2)) >= 0 && j < L) {
    weight_slot_span(r, w, m, j);
  } else if (starts_with(x, "wres.") && (j = number_after(x, 5)) >= 0 && j < L) {
    // From its load, or, after an early load into wx.<j>, from when that buffer hands over.
    double from = 0;
    for (const Load& l : loads_)
      if (l.layer == j && l.resident) from = l.early && l.reader >= 0 ? ops_[l.reader].start : ops_[l.op].start;
    span(from, end_or(last_compute_of_layer_[j], step));
  } else if (starts_with(x, "wx.") && (j = number_after(x, 3)) >= 0 && j < L) {
    // An early load's own buffer, until its reader starts (from then on it is in a slot).
    const int load = transfer_from("w." + std::to_string(j), Link::H2D, w);
    int reader = -1;
    for (const Load& l : loads_)
      if (l.op == load) reader = l.reader;
    span(start_of(load), reader >= 0 ? ops_[reader].start : step);
  } else if (starts_with(x, "g.") && (j = number_after(x, 2)) >= 0 && j < L) {
    // Layer j's gradient slot: filled by B{j}, held until its drain (late or not) ends.
    span(start_of(backward_op_[j]), end_or(last_piece(x, Link::D2H), step));
  } else if (starts_with(x, "gx.") && (j = number_after(x, 3)) >= 0 && j < L) {
    // A late drain's slot past the rule's drain window: within g.<j>'s span above when the
    // plan allocates g.<j>; in plans that counted two gradient slots as fixed, from when
    // the backward two after B{j} needs the slot.
    if (allocates_grad_slots_) return;
    const auto it = std::find(backward_order_.begin(), backward_order_.end(), backward_op_[j]);
    const int reuse = it != backward_order_.end() && it + 2 < backward_order_.end() ? *(it + 2) : -1;
    span(reuse >= 0 ? ops_[reuse].start : end_or(backward_op_[j], step), end_or(last_piece("g." + std::to_string(j), Link::D2H), step));
  } else if (boundary_part(x, b, part) && b <= L) {
    boundary_span(r, w, m, b, part);
  } else if (starts_with(x, "rc.") && (b = number_after(x, 3)) > 0 && b <= L) {
    span(start_of(recompute_op_[b - 1]), end_or(last_backward_reader(b), step));
  } else if (starts_with(x, "int.") && (j = number_after(x, 4)) >= 0 && j < L) {
    // Kept internals: written by the forward or the recompute that allocates them, or (a
    // plan before version 3) held by F{j}'s workspace, counted there, until F{j} ends.
    const bool by_own_pass = p_.windows[w].layer == j && (p_.windows[w].kind == WindowKind::Recompute ||
                                                           p_.windows[w].kind == WindowKind::Forward);
    span(by_own_pass ? start_of(first_compute_[w]) : end_or(forward_op_[j], 0), end_or(backward_op_[j], step));
  } else if (x == "dx.0") {  // B0's output, held by its workspace until it ends
    span(end_or(L > 0 ? backward_op_[0] : -1, 0), end_or(last_piece(x, Link::D2H), step));
  } else {
    violation(p_.windows[w].name + ": allocates " + x + ", a compute-tier tensor this simulator does not know");
    span(0, step);
  }
}

// Layer j's weight slot for one compute (w.<j>: its forward, a resident layer's every
// compute, or in a plan before version 3 the next compute after window w; wr.<j>: its
// recompute; wb.<j>: its backward), allocated by window w with its load: from that
// load's start to the end of the compute. In a plan before version 3 the slot is
// allocated with the rule's load, and an early load holds wx.<j> until its reader starts;
// a resident layer's forward load is read as its resident copy.
void EventGraph::weight_slot_span(EventSimResult& r, int w, const MemOp& m, int j) {
  int reader = -1;
  if (starts_with(m.tensor, "wr.")) {
    reader = recompute_op_[j];
  } else if (starts_with(m.tensor, "wb.")) {
    reader = backward_op_[j];
  } else if (backward_op_[j] >= 0 && freed_in(m.tensor) == ops_[backward_op_[j]].window) {
    reader = backward_op_[j];  // a resident layer's slot, read by every compute of the layer
  } else {
    for (int c : {forward_op_[j], recompute_op_[j], backward_op_[j]})
      if (c >= 0 && ops_[c].window > w && (reader < 0 || ops_[c].window < ops_[reader].window)) reader = c;
  }
  const Load* load = nullptr;
  for (const Load& l : loads_)
    if ((reader >= 0 && l.reader == reader) || (l.resident && l.layer == j && ops_[l.op].window == w)) load = &l;
  const double to = end_or(reader, r.step_s);
  const bool slot_from_reader = load && load->early && reader >= 0 && ops_[load->op].window != w;
  const double from = !load ? (reader >= 0 ? ops_[reader].start : 0)
                            : slot_from_reader ? ops_[reader].start : ops_[load->op].start;
  r.gpu_spans.push_back({m.tensor, m.bytes, from, std::max(from, to)});
}

// The window that frees `tensor`, or -1.
int EventGraph::freed_in(const std::string& tensor) const {
  for (size_t w = 0; w < p_.windows.size(); ++w)
    for (const MemOp& f : p_.windows[w].free)
      if (f.tensor == tensor) return static_cast<int>(w);
  return -1;
}

// The executor's requests that a plan before version 3 does not name
// (plan/stream_schedule.h): a boundary's rows (x.<b>: whole, or an offloaded one's
// other rows until they have gone out) and those fetched back (r.<b>, r.<b>.<k>), a
// use's weight slot (wr.<j>, wb.<j>), HEAD's tensors, the two boundary gradients backward
// alternates between (dx.<k> from HEAD), and a window's workspace (ws.<window>). False
// for other names (gpu_span's rules; the head's slots are there, beside w.head's).
bool EventGraph::arena_span(EventSimResult& r, int w, const MemOp& m) {
  const double step = r.step_s;
  const int L = p_.num_layers;
  const std::string& x = m.tensor;
  auto span = [&](double from, double to) { r.gpu_spans.push_back({x, m.bytes, from, std::max(from, to)}); };
  auto start_of = [&](int op) { return op < 0 ? 0.0 : ops_[op].start; };
  int b = -1, j = -1;
  if (starts_with(x, "x.") && (b = number_after(x, 2)) >= 0 && b <= L) {
    const int producer = forward_producer(b);
    const double made = producer >= 0 ? ops_[producer].start : 0;
    const int forward_reader = b < L ? forward_op_[b] : head_last_;
    const std::string id = "a." + std::to_string(b) + ".";
    const int out_cpu = last_piece(id + "cpu", Link::D2H), out_nvme = last_piece(id + "nvme", Link::D2H);
    if (out_cpu >= 0 || out_nvme >= 0) {  // an offloaded boundary's other rows: until read and gone out
      span(made, std::max({end_or(forward_reader, step), end_or(out_cpu, 0), end_or(out_nvme, 0)}));
    } else if (b < L && !p_.boundaries[b].recompute) {  // stored whole
      span(made, end_or(last_backward_reader(b), step));
    } else {
      span(made, end_or(forward_reader, step));
    }
  } else if (starts_with(x, "r.") && (b = number_after(x.substr(0, x.find('.', 2)), 2)) >= 0 && b < L) {
    // r.<b>, or r.<b>.<k>: rows a fetch brings back, from the window's first copy back
    const std::string id = "a." + std::to_string(b) + ".";
    int first = -1;
    for (const char* part : {"cpu", "nvme"})
      if (const int h2d = transfer_from(id + part, Link::H2D, w); h2d >= 0 && (first < 0 || ops_[h2d].start < ops_[first].start))
        first = h2d;
    span(first >= 0 ? ops_[first].start : 0, end_or(last_backward_reader(b), step));
  } else if ((starts_with(x, "wr.") || starts_with(x, "wb.")) && (j = number_after(x, 3)) >= 0 && j < L) {
    weight_slot_span(r, w, m, j);
  } else if (x == "head.norm_out" || x == "head.rstd" || x == "head.d_hidden") {
    span(start_of(head_first_), end_or(head_last_, step));
  } else if ((x == "dx.0" || x == "dx.1") && p_.windows[w].kind == WindowKind::Head) {
    // From HEAD, whose output is dx.0; the one holding boundary 0's gradient until E has
    // sent it to the host, the other until B0 ends.
    const int freed = freed_in(x);
    const bool to_epilogue = freed >= 0 && p_.windows[freed].kind == WindowKind::Epilogue;
    span(start_of(head_first_), to_epilogue ? end_or(last_piece("dx.0", Link::D2H), step)
                                            : end_or(L > 0 ? backward_op_[0] : -1, step));
  } else if (starts_with(x, "ws.") && p_.windows[w].name == x.substr(3)) {
    if (first_compute_[w] >= 0) span(ops_[first_compute_[w]].start, ops_[last_compute_[w]].end);
  } else {
    return false;
  }
  return true;
}

void EventGraph::boundary_span(EventSimResult& r, int w, const MemOp& m, int b, const std::string& part) {
  const double step = r.step_s;
  const int L = p_.num_layers;
  const int producer = forward_producer(b);
  const double made = producer >= 0 ? ops_[producer].start : 0;
  const int forward_reader = b < L ? forward_op_[b] : head_last_;
  auto span = [&](double from, double to, double bytes) {
    r.gpu_spans.push_back({m.tensor, bytes, from, std::max(from, to)});
  };
  if (producer < 0 || w != ops_[producer].window) {  // a reload, from its copy's start to B{b}
    const int h2d = transfer_from(m.tensor, Link::H2D, w);
    span(h2d >= 0 ? ops_[h2d].start : 0, end_or(last_backward_reader(b), step), m.bytes);
    return;
  }
  if (part == "tmp" || part == "gpu") {
    span(made, end_or(part == "tmp" ? forward_reader : last_backward_reader(b), step), m.bytes);
    return;
  }
  // An offloaded part leaves the compute tier piece by piece, each once its d2h and the
  // forward that reads the boundary have ended.
  double left = m.bytes;
  const double read = end_or(forward_reader, step);
  if (const Pieces* pc = pieces(m.tensor, Link::D2H)) {
    double prev = 0;
    for (auto [o, cum] : pc->ops) {
      const double bytes = std::min(cum - prev, left);
      prev = cum;
      if (bytes <= 0) break;
      span(made, std::max(ops_[o].end, read), bytes);
      left -= bytes;
    }
  }
  if (left > 1e-6 * m.bytes + 16) span(made, step, left);  // never copied out: held to the end
}

// Host activation bytes: a piece arrives with its d2h (or NVMe read) and leaves when the
// copy that takes the same bytes onward (reload or NVMe write) ends.
void EventGraph::host_spans(EventSimResult& r) const {
  for (const auto& entry : moved_) {
    const std::string& tensor = entry.first;
    int b = -1;
    std::string part;
    if (!boundary_part(tensor, b, part) || (part != "cpu" && part != "nvme")) continue;
    auto onward = [&](Link in, Link out) {
      const Pieces* pc = pieces(tensor, in);
      if (!pc) return;
      double prev = 0;
      for (auto [o, cum] : pc->ops) {
        r.host_spans.push_back({tensor, cum - prev, ops_[o].start, end_or(covering(tensor, out, cum), r.step_s)});
        prev = cum;
      }
    };
    if (part == "cpu") {
      onward(Link::D2H, Link::H2D);
    } else {
      onward(Link::D2H, Link::NvmeWrite);
      onward(Link::NvmeRead, Link::H2D);
    }
  }
}

}  // namespace lt::event_sim
