// Internal to sim/event_simulator*.cpp: the event graph behind simulate_events. One event
// per host task, compute (a streamed head's compute is one event per vocabulary chunk and
// pass) and transfer, in the plan's issue order; each knows the events it waits for and
// the one before it on its lane. event_simulator.cpp builds and times the graph;
// event_simulator_memory.cpp turns the timed events into live spans and peaks.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "plan/plan.h"
#include "sim/event_simulator.h"

namespace lt::event_sim {

struct Op {
  std::string name;
  int window = -1;
  SimLane lane = SimLane::Compute;
  double seconds = 0, bytes = 0;
  std::vector<int> after;  // data and reuse dependencies: these end before this one starts
  int streams_with = -1;   // the compute it streams out of: starts with it, ends no earlier
  int lane_prev = -1;      // the event before it on its lane (FIFO)
  double start = 0, end = 0;
};

// One tensor's pieces over one link, in issue order, with the bytes moved up to each.
struct Pieces {
  std::vector<std::pair<int, double>> ops;  // (op, cumulative bytes)
  double total() const { return ops.empty() ? 0 : ops.back().second; }
  void add(int op, double bytes) { ops.emplace_back(op, total() + bytes); }
  int covering(double bytes) const;  // the piece with which `bytes` bytes have moved, or -1
};

bool starts_with(const std::string& s, const char* prefix);
int number_after(const std::string& s, size_t prefix);  // n in "<prefix><n>", or -1
// "a.<b>.<part>" -> b and part ("gpu", "cpu", "nvme", "tmp"); false for other names.
bool boundary_part(const std::string& s, int& b, std::string& part);

class EventGraph {
 public:
  EventGraph(const Plan& p, const HardwareProfile& hw, bool retime) : p_(p), hw_(hw), retime_(retime) {}
  EventSimResult run();

 private:
  const Plan& p_;
  const HardwareProfile& hw_;
  const bool retime_;
  std::vector<Op> ops_;
  std::vector<std::string> violations_;
  std::vector<int> first_compute_, last_compute_;  // per window, -1 for none
  std::vector<int> forward_op_, recompute_op_, backward_op_, last_compute_of_layer_;  // per layer
  bool allocates_grad_slots_ = false;  // the plan allocates g.<j> (else its fixed bytes hold two)
  std::vector<int> backward_order_;   // the B windows' computes in issue order
  int head_first_ = -1, head_last_ = -1;
  std::vector<int> head_forward_, head_backward_;  // a streamed head's chunk computes
  std::map<std::string, std::map<Link, Pieces>> moved_;  // tensor -> link -> pieces
  std::vector<std::pair<int, const Transfer*>> transfers_;
  std::map<int, double> moved_upto_;                 // transfer op -> cumulative bytes
  std::map<std::string, std::vector<int>> updates_;  // optimizer target -> its parts
  std::vector<int> broadcasts_;  // sharded data parallelism: the weights from their owners
  std::map<std::string, int> slot_sums_;  // target -> its sum in the compute-tier slots
  std::vector<std::pair<int, const HostTask*>> host_tasks_;
  double boundary_bytes_ = 0;
  struct Load {  // a w.<j> copy to the compute tier
    int op = -1, layer = -1;
    bool resident = false;  // into wres.<j>, held from forward to backward, not a slot
    bool early = false;     // before the rule's load window: into a buffer of its own
    int reader = -1;        // the compute that reads it
  };
  std::vector<Load> loads_;

  // Building (event_simulator.cpp).
  void violation(const std::string& s);
  const std::string& window_name(int op) const { return p_.windows[ops_[op].window].name; }
  std::string where(int op) const { return window_name(op) + ": " + ops_[op].name; }
  void need(int consumer, int producer, const std::string& what);
  int add(Op o);
  double bandwidth(Link l) const;
  double host_seconds(const HostTask& h) const;
  double compute_seconds(const Window& w) const;
  void add_events();
  void add_compute(const Window& win, int w);
  void note_compute(const Window& win, int id);
  int forward_producer(int b) const;
  const Pieces* pieces(const std::string& tensor, Link l) const;
  int covering(const std::string& tensor, Link l, double bytes) const;
  int last_piece(const std::string& tensor, Link l) const;
  int latest_by(const std::string& tensor, Link l, int window) const;
  void add_weight_dependencies();
  void add_head_chunk_dependencies();
  void wait_for_update(int consumer, const std::string& target);
  bool drained_late(int layer) const;
  void add_gradient_slot_dependencies();
  void need_backward_boundary(int c, int b);
  void add_compute_inputs();
  void add_transfer_sources();
  void add_paged_state_reads();
  void add_collective_sources(int id, const std::string& tensor);
  void schedule();
  void break_cycle(int i, const std::vector<bool>& done);
  void time(int i, const std::vector<bool>& done);
  int binding(int i) const;
  void charge_idle(EventSimResult& r, int op, double from, double to) const;
  void summarize(EventSimResult& r) const;

  // Memory (event_simulator_memory.cpp).
  void memory(EventSimResult& r);
  void gpu_span(EventSimResult& r, int w, const MemOp& m);
  void weight_slot_span(EventSimResult& r, int w, const MemOp& m, int j);
  void boundary_span(EventSimResult& r, int w, const MemOp& m, int b, const std::string& part);
  bool arena_span(EventSimResult& r, int w, const MemOp& m);
  int freed_in(const std::string& tensor) const;
  void host_spans(EventSimResult& r) const;
  int last_backward_reader(int b) const;
  int transfer_from(const std::string& prefix, Link l, int w, bool prefix_match = false) const;
  double end_or(int op, double otherwise) const { return op >= 0 ? ops_[op].end : otherwise; }
};

// Peak of `base` plus the spans live at once (a span ending at t is gone before one
// starting at t); `curve` gets (time, bytes) after each change.
double sweep_peak(const std::vector<LiveSpan>& spans, double base, std::vector<std::pair<double, double>>* curve);

}  // namespace lt::event_sim
