// Builds and times the event graph (sim/event_simulator_graph.h); the dependency rules are
// listed in sim/event_simulator.h.
#include "sim/event_simulator.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <queue>

#include "plan/cost_model.h"
#include "plan/data_parallel.h"
#include "sim/event_simulator_graph.h"

namespace lt {
namespace event_sim {
namespace {

// Bytes `have` cover `need`: tensors split into pieces (MILP columns in GB) sum with
// ~1e-9 relative round-off; 1e-6 relative plus 16 bytes absorbs it, far below any piece
// a plan would leave out.
bool covers(double have, double need) { return have >= need - (1e-6 * need + 16); }

bool has_compute(WindowKind k) {
  return k == WindowKind::Forward || k == WindowKind::Head || k == WindowKind::Recompute ||
         k == WindowKind::Backward;
}

SimLane lane_of(Link l) {
  switch (l) {
    case Link::H2D: return SimLane::H2D;
    case Link::D2H: return SimLane::D2H;
    case Link::Net: return SimLane::Net;
    default: return SimLane::Nvme;
  }
}

bool is_head_weight(const std::string& t) { return t == "w.head" || starts_with(t, "w.head."); }

// A streamed head's compute per chunk and pass: its share of the window's compute by
// vocabulary rows, one head-forward per row in the forward pass (the logits for the
// loss) and three in the backward pass (the logits again, then the input and weight
// gradients: the cost model's four head-forwards, plan/cost_model.h).
constexpr double kHeadForwardShare = 0.25;

}  // namespace

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

int number_after(const std::string& s, size_t prefix) {
  if (s.size() <= prefix || s.size() - prefix > 9) return -1;
  int v = 0;
  for (size_t i = prefix; i < s.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return -1;
    v = 10 * v + (s[i] - '0');
  }
  return v;
}

bool boundary_part(const std::string& s, int& b, std::string& part) {
  if (!starts_with(s, "a.")) return false;
  const size_t dot = s.find('.', 2);
  if (dot == std::string::npos) return false;
  b = number_after(s.substr(0, dot), 2);
  part = s.substr(dot + 1);
  return b >= 0;
}

int Pieces::covering(double bytes) const {
  for (auto [op, cum] : ops)
    if (covers(cum, bytes)) return op;
  return -1;
}

EventSimResult EventGraph::run() {
  add_events();
  add_weight_dependencies();
  add_head_chunk_dependencies();
  add_gradient_slot_dependencies();
  add_compute_inputs();
  add_transfer_sources();
  add_paged_state_reads();
  schedule();
  EventSimResult r;
  summarize(r);
  memory(r);
  r.violations = std::move(violations_);
  return r;
}

void EventGraph::violation(const std::string& s) {
  if (violations_.size() < 200) violations_.push_back(s);
}

// `consumer` waits for `producer`; a producer issued in a later window than its consumer
// is a plan the executor cannot run as written.
void EventGraph::need(int consumer, int producer, const std::string& what) {
  if (producer < 0) {
    violation(where(consumer) + " needs " + what + ", which the plan never provides");
    return;
  }
  if (ops_[producer].window > ops_[consumer].window)
    violation(where(consumer) + " is issued before " + what + " (" + window_name(producer) + ")");
  ops_[consumer].after.push_back(producer);
}

int EventGraph::add(Op o) {
  ops_.push_back(std::move(o));
  return static_cast<int>(ops_.size()) - 1;
}

double EventGraph::bandwidth(Link l) const {
  switch (l) {
    case Link::H2D: return hw_.h2d_bw;
    case Link::D2H: return hw_.d2h_bw;
    case Link::NvmeWrite: return hw_.nvme_write_bw;
    case Link::NvmeRead: return hw_.nvme_read_bw;
    case Link::Net: return hw_.network_bw;
  }
  return 0;
}

double EventGraph::host_seconds(const HostTask& h) const {
  if (!retime_) return h.seconds;
  return h.task == "optimizer" ? h.work / hw_.host_optimizer_params_per_s : h.work / hw_.host_memory_bw;
}

double EventGraph::compute_seconds(const Window& w) const {
  return retime_ ? w.compute_flops / hw_.effective_flops() : w.compute_s;
}

// Every host task, compute and transfer of the plan, in issue order, chained per lane.
void EventGraph::add_events() {
  const int L = p_.num_layers;
  forward_op_.assign(L, -1);
  recompute_op_.assign(L, -1);
  backward_op_.assign(L, -1);
  last_compute_of_layer_.assign(L, -1);
  first_compute_.assign(p_.windows.size(), -1);
  last_compute_.assign(p_.windows.size(), -1);
  for (size_t w = 0; w < p_.windows.size(); ++w) {
    const Window& win = p_.windows[w];
    const int wi = static_cast<int>(w);
    for (const HostTask& h : win.host) {
      const int id = add({h.task + " " + h.target, wi, SimLane::Host, host_seconds(h), 0, {}, -1, -1, 0, 0});
      if (h.task == "optimizer") updates_[h.target].push_back(id);
      host_tasks_.emplace_back(id, &h);
    }
    if (has_compute(win.kind)) add_compute(win, wi);
    for (const Transfer& t : win.transfers) {
      const double bw = bandwidth(t.link);
      const int id = add({t.tensor, wi, lane_of(t.link), bw > 0 ? t.bytes / bw : 0, t.bytes, {}, -1, -1, 0, 0});
      Pieces& pc = moved_[t.tensor][t.link];
      pc.add(id, t.bytes);
      moved_upto_[id] = pc.total();
      transfers_.emplace_back(id, &t);
      if (t.tensor == "in.0" && t.link == Link::H2D) boundary_bytes_ = pc.total();
      // Sharded data parallelism: a target's weights come in from its owner where the
      // plan updates it (plan/data_parallel.h), which its loads wait for as for an update.
      if (t.link == Link::Net && starts_with(t.tensor, "bcast.")) {
        updates_[exchange_target(t.tensor)].push_back(id);
        broadcasts_.push_back(id);
      }
      if (p_.slot_sums && t.link == Link::Net && starts_with(t.tensor, "sum.") && exchange_target(t.tensor) != "embed")
        slot_sums_[t.tensor] = id;
    }
  }
  int last_on_lane[6] = {-1, -1, -1, -1, -1, -1};
  for (size_t i = 0; i < ops_.size(); ++i) {
    int& last = last_on_lane[static_cast<int>(ops_[i].lane)];
    ops_[i].lane_prev = last;
    last = static_cast<int>(i);
  }
}

// One compute event, or for a streamed head one per chunk and pass (forward pass over
// every chunk, then the backward pass).
void EventGraph::add_compute(const Window& win, int w) {
  const double seconds = compute_seconds(win);
  if (win.kind == WindowKind::Head && p_.head_streamed()) {
    const int64_t V = p_.model.vocab_size, R = p_.head_chunk_rows, n = p_.head_chunks();
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t c = 0; c < n; ++c) {
        const double rows = static_cast<double>(std::min(R, V - c * R));
        const double share = (pass == 0 ? kHeadForwardShare : 1 - kHeadForwardShare) * rows / static_cast<double>(V);
        const std::string name = win.name + (pass == 0 ? " fwd " : " bwd ") + std::to_string(c);
        const int id = add({name, w, SimLane::Compute, seconds * share, 0, {}, -1, -1, 0, 0});
        (pass == 0 ? head_forward_ : head_backward_).push_back(id);
        if (first_compute_[w] < 0) first_compute_[w] = id;
        last_compute_[w] = id;
      }
    head_first_ = head_forward_.front();
    head_last_ = head_backward_.back();
    return;
  }
  const int id = add({win.name, w, SimLane::Compute, seconds, 0, {}, -1, -1, 0, 0});
  first_compute_[w] = last_compute_[w] = id;
  note_compute(win, id);
}

void EventGraph::note_compute(const Window& win, int id) {
  const int L = p_.num_layers;
  if (win.kind == WindowKind::Head) {
    head_first_ = head_last_ = id;
    return;
  }
  if (win.layer < 0 || win.layer >= L) {
    violation(win.name + ": computes layer " + std::to_string(win.layer) + " of a " + std::to_string(L) +
              "-layer model");
    return;
  }
  last_compute_of_layer_[win.layer] = id;
  if (win.kind == WindowKind::Forward) forward_op_[win.layer] = id;
  if (win.kind == WindowKind::Recompute) recompute_op_[win.layer] = id;
  if (win.kind == WindowKind::Backward) {
    backward_op_[win.layer] = id;
    backward_order_.push_back(id);
  }
}

// Boundary b as forward produces it on the compute tier: F{b-1}, or the in.0 copy.
int EventGraph::forward_producer(int b) const {
  if (b == 0) return covering("in.0", Link::H2D, boundary_bytes_);
  return b - 1 < static_cast<int>(forward_op_.size()) ? forward_op_[b - 1] : -1;
}

const Pieces* EventGraph::pieces(const std::string& tensor, Link l) const {
  auto it = moved_.find(tensor);
  if (it == moved_.end()) return nullptr;
  auto jt = it->second.find(l);
  return jt == it->second.end() ? nullptr : &jt->second;
}

int EventGraph::covering(const std::string& tensor, Link l, double bytes) const {
  const Pieces* pc = pieces(tensor, l);
  return pc ? pc->covering(bytes) : -1;
}

int EventGraph::last_piece(const std::string& tensor, Link l) const {
  const Pieces* pc = pieces(tensor, l);
  return pc ? pc->ops.back().first : -1;
}

// The latest copy of `tensor` over `l` issued by `window`, else the first one after it.
int EventGraph::latest_by(const std::string& tensor, Link l, int window) const {
  const Pieces* pc = pieces(tensor, l);
  int found = -1;
  if (pc)
    for (auto [o, cum] : pc->ops)
      if (found < 0 || ops_[o].window <= window) found = o;
  return found;
}

// Weight loads: which compute reads each, and the two slots they take in turn.
void EventGraph::add_weight_dependencies() {
  const int L = p_.num_layers;
  for (auto [id, t] : transfers_) {
    if (t->link != Link::H2D || !starts_with(t->tensor, "w.") || is_head_weight(t->tensor)) continue;
    const int j = number_after(t->tensor, 2);
    if (j < 0 || j >= L) continue;  // reported as an unknown tensor
    // A resident layer's first load brings its resident copy (wres.<j>, allocated with the
    // load, or in the window after an early one).
    const bool resident = std::find(p_.resident_layers.begin(), p_.resident_layers.end(), j) != p_.resident_layers.end() &&
                          std::none_of(loads_.begin(), loads_.end(), [&](const Load& l) { return l.layer == j; });
    loads_.push_back({id, j, resident, false, -1});
  }
  // Each compute reads its layer's earliest unread load issued by its window (a later one
  // there is a prefetch for the layer's next compute), else the layer's resident copy.
  for (size_t c = 0; c < ops_.size(); ++c) {
    const Op& op = ops_[c];
    const Window& win = p_.windows[op.window];
    if (op.lane != SimLane::Compute || win.kind == WindowKind::Head) continue;
    const int j = win.layer;
    if (j < 0 || j >= L) continue;
    int best = -1, resident = -1, later = -1;
    for (size_t i = 0; i < loads_.size(); ++i) {
      Load& l = loads_[i];
      if (l.layer != j) continue;
      if (l.resident) {
        if (resident < 0) resident = static_cast<int>(i);
        continue;
      }
      if (l.reader >= 0) continue;
      if (ops_[l.op].window <= op.window) {
        if (best < 0) best = static_cast<int>(i);
      } else if (later < 0) {
        later = static_cast<int>(i);
      }
    }
    const int id = static_cast<int>(c);
    const std::string what = "the weights of layer " + std::to_string(j);
    if (best >= 0) {
      loads_[best].reader = id;
      need(id, loads_[best].op, what);
    } else if (resident >= 0) {
      need(id, loads_[resident].op, what + " (resident)");
    } else if (later >= 0) {
      loads_[later].reader = id;
      need(id, loads_[later].op, what);
    } else {
      need(id, -1, what);
    }
  }
  // A load issued before the window ahead of its reader's (the rule's load window) is
  // early: it holds a slot of its own from its load (plan_decisions.h).
  for (Load& l : loads_)
    l.early = !l.resident && l.reader >= 0 && ops_[l.op].window < ops_[l.reader].window - 1;
  // Two slots in turn, in the order their loads are read: a load overwrites what the
  // load two before it brought, once that load's reader is done. An early load lands in
  // a buffer of its own and waits for no slot.
  std::vector<const Load*> slot_loads;
  for (const Load& l : loads_)
    if (!l.resident) slot_loads.push_back(&l);
  auto read_at = [](const Load* l) { return l->reader >= 0 ? l->reader : l->op; };
  std::stable_sort(slot_loads.begin(), slot_loads.end(),
                   [&](const Load* a, const Load* b) { return read_at(a) < read_at(b); });
  for (size_t n = 2; n < slot_loads.size(); ++n) {
    if (slot_loads[n]->early) continue;
    const Load& prev = *slot_loads[n - 2];
    need(slot_loads[n]->op, read_at(&prev), "the last read of its weight slot (" + ops_[prev.op].name + ")");
  }
  // A layer's first load of the step brings the weights its host update wrote.
  std::vector<bool> first(L, true);
  for (const Load& l : loads_)
    if (first[l.layer]) {
      first[l.layer] = false;
      wait_for_update(l.op, "layer." + std::to_string(l.layer));
    }
}

// A streamed head: each chunk compute reads its chunk's load (w.head.norm first), the
// loads take two chunk buffers in turn, and the backward pass's chunk gradients two
// gradient buffers.
void EventGraph::add_head_chunk_dependencies() {
  if (head_forward_.empty()) return;
  const int64_t n = static_cast<int64_t>(head_forward_.size());
  struct ChunkLoad {
    int op, chunk, reader = -1;
  };
  std::vector<ChunkLoad> loads;
  for (auto [id, t] : transfers_)
    if (t->link == Link::H2D && starts_with(t->tensor, "w.head.") && number_after(t->tensor, 7) >= 0)
      loads.push_back({id, number_after(t->tensor, 7)});
  std::vector<int> computes = head_forward_;
  computes.insert(computes.end(), head_backward_.begin(), head_backward_.end());
  for (size_t k = 0; k < computes.size(); ++k) {
    const int chunk = static_cast<int>(static_cast<int64_t>(k) % n);
    auto it = std::find_if(loads.begin(), loads.end(), [&](const ChunkLoad& l) { return l.chunk == chunk && l.reader < 0; });
    const std::string what = "w.head." + std::to_string(chunk);
    if (it == loads.end()) {
      need(computes[k], -1, what);
      continue;
    }
    it->reader = computes[k];
    need(computes[k], it->op, what);
  }
  need(head_first_, latest_by("w.head.norm", Link::H2D, ops_[head_first_].window), "w.head.norm");
  auto read_at = [](const ChunkLoad& l) { return l.reader >= 0 ? l.reader : l.op; };
  std::stable_sort(loads.begin(), loads.end(), [&](const ChunkLoad& a, const ChunkLoad& b) { return read_at(a) < read_at(b); });
  for (size_t k = 2; k < loads.size(); ++k)
    need(loads[k].op, read_at(loads[k - 2]), "the last read of its chunk buffer (" + ops_[loads[k - 2].op].name + ")");
  for (int64_t c = 2; c < n; ++c) {
    const std::string g = "g.head." + std::to_string(c - 2);
    need(head_backward_[c], last_piece(g, Link::D2H), "the d2h of " + g + " (its gradient buffer)");
  }
}

// The weights `target`'s update writes. A lazy optimizer updates target by target; any
// other runs its whole step (clip pass included) before the forward reads a weight.
void EventGraph::wait_for_update(int consumer, const std::string& target) {
  if (!p_.lazy_optimizer) {
    for (auto [id, h] : host_tasks_) need(consumer, id, "the optimizer step (" + h->task + " " + h->target + ")");
    for (int id : broadcasts_) need(consumer, id, "the weights from their owner (" + ops_[id].name + ")");
    return;
  }
  auto it = updates_.find(target);
  if (it == updates_.end()) return;
  for (int part : it->second) need(consumer, part, "the host update of " + target);
}

// A gradient drained later than the rule's window (B{j-1}'s) holds a slot of its own to
// its drain (plan_decisions.h), not one of the two the backwards take in turn.
bool EventGraph::drained_late(int layer) const {
  if (layer < 1 || layer >= static_cast<int>(backward_op_.size()) || backward_op_[layer - 1] < 0) return false;
  const int drain = last_piece("g." + std::to_string(layer), Link::D2H);
  return drain >= 0 && ops_[drain].window > ops_[backward_op_[layer - 1]].window;
}

// Two gradient slots in turn: B{j} writes the slot the gradient two before it drained from.
void EventGraph::add_gradient_slot_dependencies() {
  for (size_t n = 2; n < backward_order_.size(); ++n) {
    const int prev = p_.windows[ops_[backward_order_[n - 2]].window].layer;
    if (drained_late(prev)) continue;
    const std::string g = "g." + std::to_string(prev);
    need(backward_order_[n], last_piece(g, Link::D2H), "the d2h of " + g + " (its gradient slot)");
  }
}

// Boundary b as backward reads it: recomputed, or its gpu part plus its parts copied back.
void EventGraph::need_backward_boundary(int c, int b) {
  if (b > 0 && b < static_cast<int>(p_.boundaries.size()) && p_.boundaries[b].recompute) {
    need(c, recompute_op_[b - 1], "rc." + std::to_string(b));
    return;
  }
  need(c, forward_producer(b), "boundary " + std::to_string(b));
  if (b >= static_cast<int>(p_.boundaries.size())) return;
  const BoundaryPlacement& bp = p_.boundaries[b];
  const std::pair<const char*, double> parts[] = {{"cpu", bp.cpu}, {"nvme", bp.nvme}};
  for (auto [part, frac] : parts) {
    if (frac <= 0) continue;
    const std::string t = "a." + std::to_string(b) + "." + part;
    const double bytes = frac * boundary_bytes_;
    const int piece = covering(t, Link::H2D, bytes);
    if (piece < 0) {
      const Pieces* pc = pieces(t, Link::H2D);
      violation(where(c) + " reads " + t + " but only " + std::to_string(pc ? pc->total() : 0.0) + " of its " +
                std::to_string(bytes) + " bytes are ever copied back");
      continue;
    }
    need(c, piece, t + " copied back");
  }
}

void EventGraph::add_compute_inputs() {
  const int L = p_.num_layers;
  if (head_first_ >= 0) {
    need(head_first_, forward_producer(L), "boundary " + std::to_string(L));
    if (head_forward_.empty())
      need(head_first_, latest_by("w.head", Link::H2D, ops_[head_first_].window), "w.head");
  }
  for (size_t c = 0; c < ops_.size(); ++c) {
    const Op& op = ops_[c];
    const Window& win = p_.windows[op.window];
    if (op.lane != SimLane::Compute || win.kind == WindowKind::Head) continue;
    const int j = win.layer, id = static_cast<int>(c);
    if (j < 0 || j >= L) continue;
    if (win.kind == WindowKind::Forward) need(id, forward_producer(j), "boundary " + std::to_string(j));
    else need_backward_boundary(id, j);
  }
}

// Where each transfer's bytes come from.
void EventGraph::add_transfer_sources() {
  const int L = p_.num_layers;
  std::map<std::string, bool> head_loaded;  // a head tensor's first load waits for its update
  for (const auto& entry : transfers_) {
    // Plain names, not a structured binding: the lambda below captures them (clang 14
    // cannot capture structured bindings).
    const auto id = entry.first;
    const auto* const t = entry.second;
    const std::string& x = t->tensor;
    const double upto = moved_upto_[id];
    int b = -1, j = -1;
    std::string part;
    const bool boundary = boundary_part(x, b, part) && b <= L && (part == "cpu" || part == "nvme");
    auto unknown = [&] { violation(where(id) + " (" + link_name(t->link) + "): no rule says where its bytes come from"); };
    switch (t->link) {
      case Link::H2D:
        if (x == "in.0") {
          wait_for_update(id, "embed");
        } else if (is_head_weight(x)) {
          if (!head_loaded[x]) wait_for_update(id, "head");
          head_loaded[x] = true;
        } else if (starts_with(x, "w.") && (j = number_after(x, 2)) >= 0 && j < L) {
          // add_weight_dependencies
        } else if (boundary && part == "cpu") {
          need(id, covering(x, Link::D2H, upto), x + " in host memory");
        } else if (boundary) {
          need(id, covering(x, Link::NvmeRead, upto), x + " read back from NVMe");
        } else {
          unknown();
        }
        break;
      case Link::D2H:
        if (boundary) {
          need(id, forward_producer(b), "boundary " + std::to_string(b));
        } else if (x == "g.head") {
          if (head_first_ < 0) need(id, -1, "HEAD");
          else if (ops_[head_first_].window > ops_[id].window) violation(where(id) + " is issued before HEAD");
          else ops_[id].streams_with = head_first_;
        } else if (x == "g.head.norm") {
          need(id, head_last_, "the head's backward pass");
        } else if (starts_with(x, "g.head.") && (j = number_after(x, 7)) >= 0) {
          need(id, j < static_cast<int>(head_backward_.size()) ? head_backward_[j] : -1, "the backward of head chunk " + std::to_string(j));
        } else if (x == "dx.0") {
          need(id, L > 0 ? backward_op_[0] : -1, "B0");
        } else if (starts_with(x, "g.") && (j = number_after(x, 2)) >= 0 && j < L) {
          need(id, backward_op_[j], "B" + std::to_string(j));
        } else {
          unknown();
        }
        // A slot drains once the ranks' sum in it is done (plan/data_parallel.h).
        if (const auto sum = starts_with(x, "g.") ? slot_sums_.find("sum." + x.substr(2)) : slot_sums_.end();
            sum != slot_sums_.end())
          need(id, sum->second, "the sum over the ranks in its slot (" + sum->first + ")");
        break;
      case Link::NvmeWrite:
        if ((starts_with(x, "os.") || starts_with(x, "cp.")) && (j = number_after(x, 3)) >= 0 && j < L) {
          // A paged state written back, or a paged bf16 copy written out, once its update made it.
          if (!updates_.count("layer." + std::to_string(j)))
            violation(where(id) + " writes back a state that no update in this step changed");
          wait_for_update(id, "layer." + std::to_string(j));
        } else if (starts_with(x, "gs.") && (j = number_after(x, 3)) >= 0 && j < L) {
          // Paged gradients: written once they are on the host (their drain's copy).
          const std::string g = "g." + std::to_string(j);
          int drain = -1;
          for (auto [tid, tr] : transfers_)
            if (tr->link == Link::D2H && tr->tensor == g) drain = std::max(drain, tid);
          need(id, drain, g + " drained to the host");
        } else if (boundary && part == "nvme") {
          need(id, covering(x, Link::D2H, upto), x + " in host staging");
        } else {
          unknown();
        }
        break;
      case Link::Net:
        add_collective_sources(id, x);
        break;
      case Link::NvmeRead:
        if (starts_with(x, "os.") && number_after(x, 3) >= 0) break;  // on NVMe since the last step
        if ((boundary && part == "nvme") || starts_with(x, "cp."))
          need(id, covering(x, Link::NvmeWrite, upto), x + " written to NVMe");
        else unknown();
        break;
    }
  }
}

// Data-parallel collectives (plan/data_parallel.h). A sum waits for its gradient's last
// drain; P0's sums are the previous step's (its gradients drained after this step's
// windows), and P0's host work (the updates) waits for them. A slot sum waits for the
// backward that made its gradient (its drains for it, above). A weight broadcast waits for
// the ranks' update of their parts.
void EventGraph::add_collective_sources(int id, const std::string& x) {
  const int w = ops_[id].window;
  if (starts_with(x, "bcast.")) {
    bool any = false;
    for (auto [hid, h] : host_tasks_)
      if (h->task == "optimizer" && h->target == "rank part") {
        need(id, hid, "this rank's update of its part");
        any = true;
      }
    if (!any) violation(where(id) + ": weights sent out, but no rank updates its part");
    return;
  }
  if (!starts_with(x, "sum.")) {
    violation(where(id) + " (net): no rule says where its bytes come from");
    return;
  }
  const std::string t = exchange_target(x);
  if (slot_sums_.count(x)) {  // in the compute-tier slot, once backward made the gradient
    if (t == "head") {  // a streamed head's chunk c once its backward is done; the rest at the head's end
      const int c = starts_with(x, "sum.head.") ? number_after(x, 9) : -1;
      if (c >= 0) need(id, c < static_cast<int>(head_backward_.size()) ? head_backward_[c] : -1,
                       "the backward of head chunk " + std::to_string(c));
      else need(id, head_last_, "the head's backward pass");
      return;
    }
    const int j = number_after(t, 6);
    need(id, j >= 0 && j < static_cast<int>(backward_op_.size()) ? backward_op_[j] : -1, "B" + std::to_string(j));
    return;
  }
  if (p_.windows[size_t(w)].kind == WindowKind::Prologue0) {
    for (auto [hid, h] : host_tasks_)
      if (ops_[hid].window == w) need(hid, id, "the gradient sum " + x);
    return;
  }
  // The last drain that completes the target's gradient.
  int drain = -1;
  for (auto [tid, tr] : transfers_)
    if (drained_target(*tr) == t) drain = std::max(drain, tid);
  need(id, drain, "the drain of " + t + "'s gradient");
}

// A paged layer's update waits for its optimizer state's NVMe read.
void EventGraph::add_paged_state_reads() {
  for (auto [id, h] : host_tasks_) {
    if (h->task != "optimizer" || !starts_with(h->target, "layer.")) continue;
    const int j = number_after(h->target, 6);
    if (std::find(p_.nvme_state_layers.begin(), p_.nvme_state_layers.end(), j) == p_.nvme_state_layers.end()) continue;
    const std::string os = "os." + std::to_string(j);
    need(id, covering(os, Link::NvmeRead, paged_layer_bytes(p_, j).read), os + " read from NVMe");
  }
  // A paged bf16 copy's backward reads it back first.
  for (int j : p_.nvme_copy_layers)
    if (j >= 0 && j < static_cast<int>(backward_op_.size()) && backward_op_[j] >= 0) {
      const std::string cp = "cp." + std::to_string(j);
      need(backward_op_[j], covering(cp, Link::NvmeRead, paged_layer_bytes(p_, j).copy), cp + " read from NVMe");
    }
}

// Start times in dependency order (Kahn, the earliest issued first). A cycle of waits is
// broken at its earliest event, whose unmet dependencies are dropped and reported.
void EventGraph::schedule() {
  const size_t n = ops_.size();
  std::vector<std::vector<int>> succ(n);
  std::vector<int> pending(n, 0);
  for (size_t i = 0; i < n; ++i) {
    std::vector<int> preds = ops_[i].after;
    if (ops_[i].lane_prev >= 0) preds.push_back(ops_[i].lane_prev);
    if (ops_[i].streams_with >= 0) preds.push_back(ops_[i].streams_with);
    for (int pr : preds) {
      succ[pr].push_back(static_cast<int>(i));
      ++pending[i];
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (size_t i = 0; i < n; ++i)
    if (pending[i] == 0) ready.push(static_cast<int>(i));
  std::vector<bool> done(n, false);
  size_t finished = 0, next_unfinished = 0;
  while (finished < n) {
    if (ready.empty()) {
      while (done[next_unfinished]) ++next_unfinished;
      break_cycle(static_cast<int>(next_unfinished), done);
      ready.push(static_cast<int>(next_unfinished));
    }
    const int i = ready.top();
    ready.pop();
    if (done[i]) continue;
    time(i, done);
    done[i] = true;
    ++finished;
    for (int s : succ[i])
      if (!done[s] && --pending[s] == 0) ready.push(s);
  }
}

// The earliest unfinished event's lane predecessor is finished (it was issued earlier),
// so only data dependencies can be unmet.
void EventGraph::break_cycle(int i, const std::vector<bool>& done) {
  Op& op = ops_[i];
  std::vector<int> kept;
  for (int a : op.after) {
    if (done[a]) kept.push_back(a);
    else violation(where(i) + " and " + where(a) + " wait for each other (a cycle of waits)");
  }
  op.after = std::move(kept);
  if (op.streams_with >= 0 && !done[op.streams_with]) {
    violation(where(i) + " streams out of " + where(op.streams_with) + ", which waits for it");
    op.streams_with = -1;
  }
}

void EventGraph::time(int i, const std::vector<bool>& done) {
  Op& op = ops_[i];
  double start = 0;
  for (int a : op.after) start = std::max(start, ops_[a].end);
  if (op.lane_prev >= 0) start = std::max(start, ops_[op.lane_prev].end);
  const bool streams = op.streams_with >= 0 && done[op.streams_with];
  if (streams) start = std::max(start, ops_[op.streams_with].start);
  op.start = start;
  op.end = start + op.seconds;
  if (streams) op.end = std::max(op.end, ops_[op.streams_with].end);
}

// The dependency (or lane predecessor) whose end let op i start; -1 if it started at 0.
int EventGraph::binding(int i) const {
  const Op& o = ops_[i];
  int b = -1;
  double t = 0;
  auto consider = [&](int d, double at) {
    if (d >= 0 && at >= t && at > 0) {
      b = d;
      t = at;
    }
  };
  if (o.lane_prev >= 0) consider(o.lane_prev, ops_[o.lane_prev].end);
  for (int a : o.after) consider(a, ops_[a].end);
  if (o.streams_with >= 0) consider(o.streams_with, ops_[o.streams_with].start);
  return b;
}

// Charges an idle stretch [from, to) of the compute lane to what it waited for: the chain
// of binding dependencies back from `op` (the event that let the compute resume), each
// link's share of the stretch to its lane, host work (an update a weight load waits for)
// as host time, copies as communication.
void EventGraph::charge_idle(EventSimResult& r, int op, double from, double to) const {
  if (to <= from || op < 0 || ops_[op].lane == SimLane::Compute) return;
  double charged = 0;
  for (int cur = op; cur >= 0 && ops_[cur].lane != SimLane::Compute; cur = binding(cur)) {
    const double share = std::max(0.0, std::min(ops_[cur].end, to) - std::max(ops_[cur].start, from));
    (ops_[cur].lane == SimLane::Host ? r.exposed_host_s : r.exposed_comm_s) += share;
    charged += share;
    if (ops_[cur].start <= from) break;
  }
  // What the chain leaves uncovered (a copy streaming out of a compute): communication.
  r.exposed_comm_s += std::max(0.0, (to - from) - charged);
}

// Step time, compute busy and idle, and what each idle stretch of the compute lane
// waited for.
void EventGraph::summarize(EventSimResult& r) const {
  for (const Op& o : ops_) {
    r.step_s = std::max(r.step_s, o.end);
    r.events.push_back({o.name, p_.windows[o.window].name, o.lane, o.start, o.end, o.bytes});
  }
  double compute_end = 0;
  for (size_t i = 0; i < ops_.size(); ++i) {
    const Op& o = ops_[i];
    if (o.lane != SimLane::Compute) continue;
    r.compute_busy_s += o.seconds;
    charge_idle(r, binding(static_cast<int>(i)), compute_end, o.start);
    compute_end = o.end;
  }
  // After the last compute: what ends last, and the chain that led to it.
  int last = -1;
  for (size_t i = 0; i < ops_.size(); ++i)
    if (last < 0 || ops_[i].end > ops_[last].end) last = static_cast<int>(i);
  charge_idle(r, last, compute_end, r.step_s);
  r.compute_idle_s = r.step_s - r.compute_busy_s;
}

}  // namespace event_sim

EventSimResult simulate_events(const Plan& plan, const HardwareProfile& hw) {
  // The plan's compute and host seconds hold on its own profile (they may be measured);
  // on another, they follow from FLOPs and work at that profile's rates.
  const bool retime = hw.name != plan.hardware.name || hw.effective_flops() != plan.hardware.effective_flops() ||
                      hw.host_optimizer_params_per_s != plan.hardware.host_optimizer_params_per_s;
  return event_sim::EventGraph(plan, hw, retime).run();
}

EventSimResult simulate_events(const Plan& plan) { return simulate_events(plan, plan.hardware); }

}  // namespace lt
