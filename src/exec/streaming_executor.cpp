#include "exec/streaming_executor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "exec/streaming_parked.h"
#include "memory/arena_layout.h"
#include "model/layer_specs.h"
#include "model/rope_frequencies.h"

namespace lt {

namespace {

bool tied(const ModelParameters& p) {
  return const_cast<ModelParameters&>(p).lm_head() == const_cast<ModelParameters&>(p).embedding();
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> target_ranges(const ModelParameters& params, const UpdateTarget& t) {
  auto& p = const_cast<ModelParameters&>(params);
  const ModelConfig& c = p.config();
  const auto off = [&](const float* x) { return static_cast<int64_t>(x - p.data()); };
  switch (t.kind) {
    case UpdateTarget::Kind::Embed: return {{0, c.vocab_size * c.hidden_size}};
    case UpdateTarget::Kind::Layer: return {{off(p.block_base(t.layer)), block_numel(c, t.layer)}};
    case UpdateTarget::Kind::Head: {
      std::vector<std::pair<int64_t, int64_t>> r{{off(p.final_norm()), c.hidden_size}};
      if (!tied(p)) r.push_back({off(p.lm_head()), c.vocab_size * c.hidden_size});
      return r;
    }
  }
  return {};
}

std::vector<GradSqTerm> ordered_grad_sq_terms(const ModelParameters& grads) {
  const int L = grads.config().num_layers;
  std::vector<GradSqTerm> terms;
  auto add = [&](const UpdateTarget& t) {
    for (auto [o, n] : target_ranges(grads, t)) terms.push_back({t, o, n});
  };
  add({UpdateTarget::Kind::Head, -1});
  for (int j = L - 1; j >= 0; --j) add({UpdateTarget::Kind::Layer, j});
  add({UpdateTarget::Kind::Embed, -1});
  return terms;
}

double ordered_grad_sq_sum(const ModelParameters& grads) {
  const KernelTable& host = cpu_kernel_table();  // the gradients lie in host memory
  double acc = 0;
  for (const GradSqTerm& t : ordered_grad_sq_terms(grads)) acc += host.sum_of_squares(grads.data() + t.offset, t.numel);
  return acc;
}

namespace {

// The layer pass's scratch, rounded up so that the saved tensors after it in a workspace
// stay aligned (plan/stream_schedule.h).
size_t layer_pass_scratch_bytes(const ModelConfig& c, int64_t batch, int64_t seq, const KernelTable& k) {
  const size_t bytes = BlockWorkspace(c, batch, seq, k).bytes();
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

// The windows whose compute is a layer's or the head's kernels (timed by the backend).
bool has_kernels(WindowKind k) {
  return k == WindowKind::Forward || k == WindowKind::Head || k == WindowKind::Recompute || k == WindowKind::Backward;
}

}  // namespace

StepScratch step_scratch(const ModelConfig& c, int64_t batch, int64_t seq, const KernelTable& k, Precision p,
                         bool streamed_head) {
  StepScratch s;
  s.layer = layer_pass_scratch_bytes(c, batch, seq, k);
  s.head = k.head_cross_entropy_workspace_bytes(batch * seq, c.hidden_size, c.vocab_size, p, streamed_head,
                                              k.head_options);
  return s;
}

size_t kernel_pool_scratch_bytes(const ModelConfig& c, int64_t batch, int64_t seq, const KernelTable& k,
                                 Precision p) {
  const KernelTable::PoolScratch& pool = k.pool_scratch;
  const int64_t T = batch * seq;
  size_t most = 0;
  const auto take = [&most](size_t bytes) { most = std::max(most, bytes); };
  // Every layer's linears: its matrices [N, K]. Counted without a bf16 copy of the weight
  // (which spares the call rounding it) and with a bias gradient: at least what a call takes.
  for (int64_t j = 0; j < c.num_layers; ++j) {
    for (const WeightSpec& w : block_weight_specs(c, j)) {
      if (w.shape.size() != 2) continue;
      const int64_t N = w.shape[0], K = w.shape[1];
      if (pool.linear_forward) take(pool.linear_forward(T, K, N, p, false));
      if (pool.linear_backward) take(pool.linear_backward(T, K, N, p, false, true));
    }
    if (pool.causal_conv1d_silu_backward && c.layer_kind(j) == LayerKind::LinearAttention)
      take(pool.causal_conv1d_silu_backward({batch, seq, c.linear.conv_dim(), c.linear.conv_kernel}));
  }
  if (pool.rmsnorm_backward) {  // the block's norms, and the q/k norms over every head's row
    take(pool.rmsnorm_backward(T, c.hidden_size));
    take(pool.rmsnorm_backward(T * std::max(c.num_heads, c.num_kv_heads), c.head_dim));
  }
  if (pool.attention_forward)
    take(pool.attention_forward(batch, seq, c.num_heads, c.num_kv_heads, c.head_dim, p));
  if (pool.attention_backward)
    take(pool.attention_backward(batch, seq, c.num_heads, c.num_kv_heads, c.head_dim, p));
  return most;
}

ExecutorScratch executor_scratch(const ModelConfig& c, int64_t batch, int64_t seq, const KernelTable& k,
                                 Precision p) {
  ExecutorScratch e;
  for (bool streamed : {false, true}) {
    const StepScratch s = step_scratch(c, batch, seq, k, p, streamed);
    e.layer_bytes = static_cast<double>(s.layer);
    e.head_bytes = std::max(e.head_bytes, static_cast<double>(s.head));
  }
  // The pool's scratch is on the compute tier beside the arena while a window computes.
  const double pool = static_cast<double>(kernel_pool_scratch_bytes(c, batch, seq, k, p));
  e.layer_bytes += pool;
  e.head_bytes += pool;
  return e;
}

ExecutorScratch executor_scratch(const ModelConfig& c, int64_t batch, int64_t seq, const KernelTable& k) {
  ExecutorScratch e = executor_scratch(c, batch, seq, k, Precision::F32);
  e.head_bytes = std::max(e.head_bytes, executor_scratch(c, batch, seq, k, Precision::BF16).head_bytes);
  return e;
}

// What this executor holds on the compute tier: fp32 activations, its kernels' scratch, its
// weight and gradient slots.
ArenaSizes executor_arena_sizes(const Plan& plan, const Backend& backend, Precision p) {
  const ModelConfig& c = plan.model;
  ArenaSizes a;
  a.boundary_token = static_cast<size_t>(c.hidden_size) * sizeof(float);
  for (int64_t j = 0; j < c.num_layers; ++j)
    a.saved.push_back(static_cast<size_t>(block_saved_numel(c, j, plan.batch, plan.seq)) * sizeof(float));
  a.scratch = step_scratch(c, plan.batch, plan.seq, backend.kernels(), p, plan.head_chunk_rows > 0);
  a.weights = compute_tier_weights(plan, backend, p);
  return a;
}

StreamingExecutor::StreamingExecutor(const Plan& plan, Backend& backend, const StreamingOptions& options)
    : plan_(plan),
      backend_(backend),
      config_(plan.model),
      batch_(plan.batch),
      seq_(plan.seq),
      T_(plan.batch * plan.seq),
      C_(plan.model.hidden_size),
      sched_(make_stream_schedule(plan, executor_arena_sizes(plan, backend, options.precision))),
      live_(sched_),
      host_("host activations", 0, backend.host_tier_memory()),
      workspace_(plan.model, plan.batch, plan.seq, backend.kernels()),
      router_loss_(plan.model) {
  weights_ = make_weight_source(config_, sched_, backend_, live_, host_, options.precision);
  grads_ = make_gradient_sink(
      config_, sched_, backend_, live_, host_, [this] { return now(); },
      [this](const std::string& name, ExecLane lane, double start, double bytes) { event(name, lane, start, bytes); });
  if (sched_.head_chunk_rows > 0) {  // a streamed head sums as the whole one only on whole sub-chunks
    const int64_t sub =
        backend_.kernels().head_cross_entropy_vocab_chunk(T_, config_.vocab_size, options.precision);
    if (sched_.head_chunk_rows % sub != 0)
      throw Error("the plan streams the head in chunks of " + std::to_string(sched_.head_chunk_rows) +
                      " rows, not a multiple of the cross-entropy's vocabulary sub-chunk of " + std::to_string(sub),
                  "streaming executor", "regenerate the plan with `lazytrain plan` (chunks are multiples of " +
                      std::to_string(kHeadChunkQuantum) + " rows)");
  }
  ctx_.shape = block_shape(config_, batch_, seq_);
  inputs_ = std::make_unique<StepInputs>(host_, config_, batch_, seq_);
  inputs_->bind_rope(ctx_);  // per-layer tables: layer_context()
  ctx_.precision = options.precision;
  ctx_.kernels = &backend_.kernels();

  // Compute tier: lay out every planned allocation, then hold exactly that many bytes,
  // from the backend.
  layout_ = lay_out_arena(sched_.arena);
  const size_t extent = arena_extent(layout_);
  if (extent > 0) {
    memory_ = Buffer(backend_.compute_memory(), extent);
    if (!memory_)
      throw Error("cannot allocate the compute tier of " + format_bytes(extent) + " on the " + backend_.name() +
                      " backend",
                  "streaming executor", "plan with a smaller --gpu-cap or free compute-tier memory");
  }
  arena_ = std::make_unique<ComputeArena>("compute tier", memory_.data(), extent, layout_);
  const size_t W = plan_.windows.size();
  acquire_at_.assign(W, {});
  release_at_.assign(W, {});
  for (size_t i = 0; i < sched_.arena.size(); ++i) {
    acquire_at_[sched_.arena[i].first_window].push_back(static_cast<int>(i));
    release_at_[sched_.arena[i].last_window].push_back(static_cast<int>(i));
  }
  for (int j = 0; j < sched_.L; ++j) saved_layout_.push_back(block_saved_layout(config_, j, batch_, seq_));
  for (const UpdateTarget& t : sched_.targets) update_event_.push_back("optimizer " + t.name());

  // Host parts and NVMe slots of the offloaded boundaries.
  const size_t row = static_cast<size_t>(C_) * sizeof(float);
  std::vector<NvmeSlot> slots;
  parked_.resize(sched_.L + 1);
  for (int b = 0; b <= sched_.L; ++b) {
    const BoundarySchedule& bs = sched_.boundaries[b];
    if (!bs.offloaded()) continue;
    auto p = std::make_unique<Parked>();
    const std::string id = "a." + std::to_string(b);
    p->out_event = id + ".out";
    p->in_event = id + ".in";
    p->nvme_write_event = id + ".nvme write";
    p->nvme_read_event = id + ".nvme read";
    p->host = host_.allocate(bs.cpu_tokens * row, id + ".cpu");
    if (bs.nvme_tokens > 0) {
      p->staging = host_.allocate(bs.nvme_tokens * row, id + ".nvme staging");
      p->slot = slots.size();
      slots.push_back({id + ".nvme", bs.nvme_tokens * row});
    }
    parked_[b] = std::move(p);
  }
  pager_ = std::make_unique<StatePager>(
      sched_, StateSlotLayout{options.layer_state_bytes, options.master_offset, options.grad_offset}, host_);
  pager_->add_nvme_slots(slots);
  copies_ = std::make_unique<CopyPager>(sched_, config_, host_);
  copies_->add_nvme_slots(slots);
  if (copies_->active()) weights_->set_paged_copy([this](int j) { return copies_->home(j); });
  if (options.grad_offset > 0)
    grads_->set_paged_home([this](int j) { return pager_->grads_home(j, *state_.grads); });
  if (!slots.empty()) {
    if (options.offload_dir.empty())
      throw Error("the plan puts activations or optimizer states on NVMe but no offload directory was given",
                  "streaming executor", "pass --offload-dir on a fast local disk");
    NvmeStoreOptions no;
    no.dir = options.offload_dir;
    no.direct_io = options.direct_io;
    nvme_ = std::make_unique<NvmeStore>(std::move(slots), no);
    pager_->attach(nvme_.get());
    copies_->attach(nvme_.get());
  }
}

// Everything issued so far is done: the copies (synchronize) and the kernels, which on a
// GPU may still run after a fault, reading the arena and the step's inputs in pinned host
// memory that the next step rewrites (cpu and emu: the kernels ran on this thread).
void StreamingExecutor::drain_backend() noexcept {
  try {
    backend_.synchronize();
    backend_.wait_host(backend_.record(Backend::Stream::Compute));
  } catch (...) {
  }
}

StreamingExecutor::~StreamingExecutor() {
  // Work still running reads or writes buffers about to be freed (only after a failed step
  // that could not drain; abort_step() normally has).
  drain_backend();
}

void StreamingExecutor::abort_step() noexcept {
  drain_backend();
  if (nvme_) {
    // Requests in flight still read or write staging buffers: finish them all. Their own
    // failures come from the same fault as the one being thrown; print, never drop them.
    for (;;) {
      try {
        nvme_->wait_all();
        break;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "lazytrain: while abandoning the failed step, also: %s\n", e.what());
      }
    }
  }
  for (auto& p : parked_)
    if (p) p->write = p->read = 0;
  pager_->abandon();
  copies_->abandon();
  grads_->abandon();
  live_.clear();
  peak_ = std::max(peak_, arena_->peak_live_bytes());
  arena_->reset();
  events_ = nullptr;
}

double StreamingExecutor::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

void StreamingExecutor::event(const std::string& name, ExecLane lane, double start, double bytes) {
  if (events_) events_->push_back({name, window_name_ ? *window_name_ : std::string(), lane, start, now(), bytes});
}

void StreamingExecutor::run_update(size_t t_index) {
  const UpdateTarget& target = sched_.targets[t_index];
  const StepOptions& o = *state_.options;
  ModelParameters& grads = *state_.grads;
  std::span<std::byte> state;
  if (target.kind == UpdateTarget::Kind::Layer && pager_->paged(target.layer))
    state = pager_->acquire(target.layer, [&](const std::string& n, double issued, double bytes) {
      event(n, ExecLane::Nvme, issued, bytes);
    });
  if (o.update) {
    const double t = now();
    (*o.update)(target, state);
    event(update_event_[t_index], ExecLane::Host, t);
  }
  // Paged gradients never come to the gradient block (they go to the pager's staging, and
  // backward zeroes it there): nothing to zero.
  if (!o.zero_grads || (target.kind == UpdateTarget::Kind::Layer && pager_->grads_paged(target.layer))) return;
  // Nor a layer's whose drain copies its whole block over the host's (a separate compute
  // tier's, GradientSink::copies_whole_layers): a 7B model's would be 28 GB of host writes.
  if (target.kind == UpdateTarget::Kind::Layer && grads_->copies_whole_layers()) return;
  for (auto [off, n] : target_ranges(grads, target))
    std::memset(grads.data() + off, 0, static_cast<size_t>(n) * sizeof(float));
}

bool StreamingExecutor::update_beside_kernels(size_t t, int w) const {
  const UpdateTarget& target = sched_.targets[t];
  if (plan_.windows[w].kind != WindowKind::Forward || target.kind != UpdateTarget::Kind::Layer) return false;
  const int j = target.layer;
  const bool moves = sched_.forward_w[j] == w || sched_.fwd_load_w[j] == w || sched_.rc_load_w[j] == w ||
                     sched_.bwd_load_w[j] == w;
  return !moves && !pager_->paged(j) && !pager_->grads_paged(j) && !copies_->paged(j);
}

// Queues the weight copies planned to arrive in window w (none on host views); waits for
// them only when this window's own compute reads them (a prefetch runs under the compute).
void StreamingExecutor::load_weights(int w, int which) {
  const double t = now();
  // What this window's compute reads goes first on the link, and only that is waited
  // for; prefetches for later windows queue behind it and run under the compute.
  auto issue = [&](bool for_this_window) {
    if (sched_.head_load_w == w && (sched_.head == w) == for_this_window) {
      if (sched_.head_chunk_rows > 0) weights_->load_head_chunk(0);  // with the final norm
      else weights_->load_head();
    }
    for (int j = 0; j < sched_.L; ++j) {
      if (sched_.fwd_load_w[j] == w && (sched_.forward_w[j] == w) == for_this_window)
        weights_->load_layer(ArenaTensor::Weights, j);
      if (sched_.rc_load_w[j] == w && (sched_.recompute_w[j] == w) == for_this_window)
        weights_->load_layer(ArenaTensor::RecomputeWeights, j);
      if (sched_.bwd_load_w[j] == w && (sched_.backward_w[j] == w) == for_this_window)
        weights_->load_layer(ArenaTensor::BackwardWeights, j);
    }
  };
  if (which & kOwnLoads) issue(true);
  const Backend::Event needed = backend_.record(Backend::Stream::H2D);
  const bool needed_now = (which & kOwnLoads) && needed.count != loads_before_window_.count;
  if (which & kPrefetches) issue(false);
  if (needed_now) {
    backend_.wait(Backend::Stream::Compute, needed);
    event("weights", ExecLane::H2D, t);
  }
}

StreamingStepResult StreamingExecutor::step(ModelParameters& params, ModelParameters& grads,
                                            const int32_t* input_ids, const int32_t* labels,
                                            const StepOptions& options) {
  try {
    return run_step(params, grads, input_ids, labels, options);
  } catch (...) {
    abort_step();
    throw;
  }
}

StreamingStepResult StreamingExecutor::run_step(ModelParameters& params, ModelParameters& grads,
                                                const int32_t* input_ids, const int32_t* labels,
                                                const StepOptions& options) {
  LT_ASSERT(params.numel() == grads.numel(), "parameter and gradient blocks differ");
  if (params.config().hidden_size != C_ || params.config().num_layers != sched_.L)
    throw Error("the parameters are for a different model than the plan", "streaming executor",
                "plan for the model you train");
  state_ = StepState{};
  state_.grads = &grads;
  state_.input_ids = input_ids;
  state_.options = &options;
  state_.batch = step_targets(labels, batch_, seq_, config_.vocab_size, options.grad_scale);
  state_.targets = inputs_->set_targets(state_.batch.targets);
  documents_.bind(ctx_, options.doc_start, batch_, seq_);
  inputs_->bind_documents(ctx_);
  state_.result.predicted_tokens = state_.batch.predicted;
  router_loss_.begin_step();
  if (arena_->current_window() >= 0) {  // a previous step walked this arena
    arena_->reset();
    live_.clear();
  }
  weights_->begin_step(params, options.compute_copy);
  copies_->begin_step(params, options.compute_copy);
  if (copies_->active() && !options.update)
    throw Error("the plan pages bf16 copies, which the update hook writes, but the step has none",
                "StepOptions::update", "set the hook in every step (it writes a paged copy even without an update)");
  grads_->begin_step(grads, options.zero_grads, options.gradient_final, options.slot_sums);
  t0_ = std::chrono::steady_clock::now();
  events_ = &state_.result.events;
  storing_.clear();  // a failed step's, drained by abort_step
  if (ctx_.precision == Precision::BF16 && options.compute_copy == nullptr)
    throw Error("a bf16 step without the bf16 compute copy", "streaming executor",
                "pass StepOptions::compute_copy (and keep it current in the update hook)");

  for (int w = 0; w < static_cast<int>(plan_.windows.size()); ++w) {
    const Window& win = plan_.windows[w];
    const double start = now();
    begin_window(w);
    const double compute_start = now();
    if (has_kernels(win.kind)) backend_.compute_begin();
    switch (win.kind) {
      case WindowKind::Prologue0:
      case WindowKind::Load: break;
      case WindowKind::Prologue1: embed(); break;
      case WindowKind::Forward: forward(win.layer); break;
      case WindowKind::Head: head(w); break;  // streaming_head.cpp
      case WindowKind::Recompute: recompute(win.layer); break;
      case WindowKind::Backward: backward(win.layer); break;
      case WindowKind::Epilogue: epilogue(); break;
    }
    end_window(w, start, compute_start);
  }
  if (nvme_) nvme_->wait_all();
  for (auto& p : parked_)
    if (p) p->write = p->read = 0;
  events_ = nullptr;
  state_.result.grad_sq_sum = state_.sq;
  state_.result.step_s = now();
  return std::move(state_.result);
}

// Before window w's compute: its arena ranges, the gradient drains and boundary fetches
// the plan puts at its start, the optimizer updates due, and its weight loads.
void StreamingExecutor::begin_window(int w) {
  const Window& win = plan_.windows[w];
  window_name_ = &win.name;
  if (state_.options->before_window) state_.options->before_window(w);
  arena_->begin_window(w);
  for (int k : acquire_at_[w]) live_.set(k, reinterpret_cast<float*>(arena_->acquire(static_cast<size_t>(k)).data()));
  if (win.kind == WindowKind::Forward || win.kind == WindowKind::Recompute || win.kind == WindowKind::Backward)
    workspace_.bind(buf(ArenaTensor::Workspace, w));  // the layer pass's scratch, ws.<window>
  // Layer gradients the plan drains in this window go out first; they and the copies of
  // earlier windows are done at this window's barrier.
  grads_->drain(w);
  state_.earlier_landings = grads_->in_flight();
  for (int b = 0; b < sched_.L; ++b) {
    const BoundarySchedule& bs = sched_.boundaries[b];
    if (!bs.offloaded()) continue;
    if (bs.nvme_read_w == w && bs.nvme_tokens > 0) start_nvme_read(b);
    for (size_t k = 0; k < bs.fetches.size(); ++k)
      if (bs.fetches[k].window == w) fetch_boundary(b, k);
  }
  pager_->start_reads(w, now());
  copies_->start_reads(w, now());
  for (size_t t = 0; t < sched_.targets.size(); ++t)  // the others after the kernels are issued (end_window)
    if (sched_.update_w[t] == w && !update_beside_kernels(t, w)) run_update(t);
  pager_->start_writes(w, now());
  pager_->start_grad_writes(w, *state_.grads, now());
  copies_->start_writes(w, now());
  loads_before_window_ = backend_.record(Backend::Stream::H2D);
  // A streamed head's chunks go first on the link; head() queues the prefetches behind
  // its last chunk.
  const bool streamed_head = win.kind == WindowKind::Head && sched_.head_chunk_rows > 0;
  load_weights(w, streamed_head ? kOwnLoads : kOwnLoads | kPrefetches);
}

void StreamingExecutor::embed() {
  weights_->embed(whole_boundary(ArenaTensor::Boundary, 0), state_.input_ids);
  store_boundary(0);
}

float* StreamingExecutor::saved_in_workspace(int w) {
  return buf(ArenaTensor::Workspace, w) + sched_.workspace_saved_offset / sizeof(float);
}

void StreamingExecutor::forward(int j) {
  float* saved =
      sched_.keep_internals[j] ? buf(ArenaTensor::Internals, j) : saved_in_workspace(sched_.forward_w[j]);
  BlockSaved sv = bind_block_saved(saved_layout_[j], saved);
  const auto [wj, bj] = weights_->layer(ArenaTensor::Weights, j);
  block_forward(whole_boundary(ArenaTensor::Boundary, j + 1), sv, workspace_,
                whole_boundary(ArenaTensor::Boundary, j), wj, bj, layer_context(ctx_, config_, j));
  router_loss_.add_layer(config_, j, sv, ctx_.shape);
  if (j + 1 < sched_.L) store_boundary(j + 1);
}

void StreamingExecutor::recompute(int j) {
  LT_ASSERT(state_.d_in != nullptr, "recompute window before HEAD");
  BlockSaved sv = bind_block_saved(saved_layout_[j], saved_in_workspace(sched_.recompute_w[j]));
  // A plan may recompute a block's top layer too (megatrain-code does, for its
  // internals); its output is a stored boundary, so it goes to the spare gradient.
  const bool stored = j + 1 == sched_.L || sched_.boundaries[j + 1].stored;
  float* out = stored ? state_.d_in : buf(ArenaTensor::Recomputed, j + 1);
  const auto [wj, bj] = weights_->layer(ArenaTensor::RecomputeWeights, j);
  block_forward(out, sv, workspace_, boundary_input(j), wj, bj, layer_context(ctx_, config_, j));
}

void StreamingExecutor::backward(int j) {
  LT_ASSERT(state_.d_out != nullptr, "backward window before HEAD");
  const float* x_in = boundary_input(j);
  const auto [wj, bj] = weights_->layer(ArenaTensor::BackwardWeights, j);
  BlockContext ctx = layer_context(ctx_, config_, j);
  ctx.router_loss = router_loss_.grad();
  BlockSaved sv;
  if (sched_.keep_internals[j]) {
    sv = bind_block_saved(saved_layout_[j], buf(ArenaTensor::Internals, j));
  } else {
    // Rerun the block; its output is not needed, so it goes to the spare gradient.
    sv = bind_block_saved(saved_layout_[j], saved_in_workspace(sched_.backward_w[j]));
    block_forward(state_.d_in, sv, workspace_, x_in, wj, bj, ctx);
  }
  BlockTensors gj = bind_block_tensors(config_, j, grads_->layer(j));
  block_backward(state_.d_in, gj, workspace_, state_.d_out, x_in, wj, bj, sv, ctx);
  grads_->layer_done(j, state_.sq);
  std::swap(state_.d_in, state_.d_out);
}

void StreamingExecutor::epilogue() {
  LT_ASSERT(state_.d_out != nullptr, "epilogue before HEAD");
  grads_->embedding(state_.d_out, state_.input_ids);  // its norm is summed after the barrier, behind layer 0's
}

// After window w's compute: the compute time a slower tier stretches, the window's
// barrier and gradient norms, its NVMe write-backs, and its frees.
void StreamingExecutor::end_window(int w, double start, double compute_start) {
  const Window& win = plan_.windows[w];
  StreamingStepResult& result = state_.result;
  double compute_end = now();
  if (has_kernels(win.kind)) {
    // A slower compute tier (emu) stretches the kernels' own time, not the waits for
    // copies among them (traced as their own events).
    double kernels = compute_end - compute_start;
    for (auto e = result.events.rbegin(); e != result.events.rend() && e->start_s >= compute_start; ++e)
      kernels -= e->end_s - e->start_s;
    backend_.compute_issued(std::max(0.0, kernels));
    // The updates that run beside the kernels (on a GPU, while they run).
    for (size_t t = 0; t < sched_.targets.size(); ++t)
      if (sched_.update_w[t] == w && update_beside_kernels(t, w)) run_update(t);
    compute_end += backend_.compute_done();  // when the kernels ended, not the updates
  }
  if (win.kind != WindowKind::Prologue0 && win.kind != WindowKind::Load && events_)
    events_->push_back({win.name, win.name, ExecLane::Compute, compute_start, compute_end, 0});
  finish_boundary_stores();  // after the kernels and the updates beside them
  // The window's barrier: its copies to the compute tier are done before its frees.
  // A gradient copied out during this window's compute (the head's) drains under the
  // next one (its slot lives through that window, as the plan's g.head transfer does);
  // layer gradients drain in the window the plan's g.<j> transfer names, copied at its
  // start; the copies issued before this window's compute are done now. The epilogue,
  // the last window, waits for everything.
  if (win.kind == WindowKind::Epilogue || w + 1 == static_cast<int>(plan_.windows.size())) {
    backend_.synchronize();
    state_.sq = grads_->finish(state_.sq, grads_->in_flight());
  } else {
    backend_.wait_host(backend_.record(Backend::Stream::H2D));  // the frees below are the host's
    state_.sq = grads_->finish(state_.sq, state_.earlier_landings);
  }
  const auto traced = [&](const std::string& n, double issued, double bytes) { event(n, ExecLane::Nvme, issued, bytes); };
  pager_->finish_writes(w, traced);
  pager_->finish_grad_writes(w, traced);
  copies_->finish_writes(w, traced);
  copies_->finish_reads(w, traced);
  if (win.kind == WindowKind::Epilogue) {
    state_.sq += cpu_kernel_table().sum_of_squares(state_.grads->embedding(),  // on the host
                                                   config_.vocab_size * C_);
    if (state_.options->gradient_final) (*state_.options->gradient_final)({UpdateTarget::Kind::Embed, -1});
  }
  result.compute_bytes.push_back({now(), static_cast<double>(arena_->live_bytes())});
  for (int k : release_at_[w]) {
    arena_->release(static_cast<size_t>(k));
    live_.set(k, nullptr);
  }
  result.windows.push_back({win.name, start, now()});
}

}  // namespace lt
