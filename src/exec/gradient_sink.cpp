#include "exec/gradient_sink.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <optional>

#include "core/error.h"
#include "layers/decoder_block.h"

namespace lt {

namespace {

// The compute tier is host memory: kernels add into the host gradient block.
class SumInPlace final : public GradientSink {
 public:
  SumInPlace(const ModelConfig& c, const StreamSchedule& s) : c_(c), s_(s) {}

  float* layer(int j) override {
    float* g = host_layer(j);
    if (g != grads_->block_base(j))  // a paged layer's reused staging buffer
      std::memset(g, 0, static_cast<size_t>(block_numel(c_, j)) * sizeof(float));
    return g;
  }
  void layer_done(int j, double& sq) override {
    sq += host_kernels_.sum_of_squares(host_layer(j), block_numel(c_, j));
    finished({UpdateTarget::Kind::Layer, j});
  }
  void drain(int) override {}
  size_t in_flight() const override { return 0; }
  double finish(double sq, size_t n) override {
    LT_ASSERT(n == 0, "finishing gradient copies never issued");
    return sq;
  }

  float* final_norm() override { return grads_->final_norm(); }
  float* lm_head() override { return grads_->lm_head(); }
  float* head_chunk(int64_t chunk) override { return grads_->lm_head() + chunk * s_.head_chunk_rows * c_.hidden_size; }
  void head_chunk_done(int64_t) override {}
  void head_done(double& sq) override {
    sq += host_kernels_.sum_of_squares(grads_->final_norm(), c_.hidden_size);
    if (!c_.tie_word_embeddings)
      sq += host_kernels_.sum_of_squares(grads_->lm_head(), c_.vocab_size * c_.hidden_size);
    finished({UpdateTarget::Kind::Head, -1});
  }

  void embedding(float* d_x0, const int32_t* ids) override {
    embed_backward(host_kernels_, grads_->embedding(), ids, d_x0, s_.tokens, c_);
  }
  void abandon() override {}

 private:
  const ModelConfig& c_;
  const StreamSchedule& s_;
};

// A separate compute tier: kernels add into zeroed arena slots, drained to the host.
class SlotAndDrain final : public GradientSink {
 public:
  SlotAndDrain(const ModelConfig& c, const StreamSchedule& s, Backend& backend, const LiveArena& arena, HostPool& host,
               Now now, Trace trace)
      : c_(c), s_(s), backend_(backend), arena_(arena), now_(std::move(now)), trace_(std::move(trace)) {
    const int64_t T = s.tokens, C = s.hidden, V = c.vocab_size;
    dx0_ = host.allocate(static_cast<size_t>(T * C) * sizeof(float), "dx.0");
    const int64_t head_rows = s.head_chunk_rows > 0 ? s.head_chunk_rows : V;  // one lm_head slot
    grad_stage_ = host.allocate(static_cast<size_t>(std::max(max_block_numel(c), head_rows * C)) * sizeof(float),
                                "gradient staging");
  }

  float* layer(int j) override { return zeroed(arena_(ArenaTensor::Gradients, j), block_numel(c_, j)); }
  void layer_done(int j, double&) override {
    float* slot = arena_(ArenaTensor::Gradients, j);
    const int64_t n = block_numel(c_, j);
    const UpdateTarget target{UpdateTarget::Kind::Layer, j};
    const int64_t sum = slot_sums_ ? slot_sums_->start(target, slot, n) : 0;  // under the layers below
    pending_.push_back({host_layer(j), slot, n, s_.grad_drain_w[j], j, sum});
  }
  void drain(int w) override {
    while (!pending_.empty() && pending_.front().window == w) {
      const Pending g = pending_.front();
      if (slot_sums_) slot_sums_->before_drain(g.sum);
      // Ordered: a failure from here on leaves abandon() the sums not yet ordered (a sum's
      // ticket is spent once ordered).
      pending_.erase(pending_.begin());
      land(g.host, g.slot, g.n, true, UpdateTarget{UpdateTarget::Kind::Layer, g.layer});
    }
    LT_ASSERT(pending_.empty() || pending_.front().window > w, "a gradient drain the plan's window passed");
  }
  size_t in_flight() const override { return landings_.size(); }
  double finish(double sq, size_t n) override {
    LT_ASSERT(n <= landings_.size(), "finishing gradient copies never issued");
    if (n == 0) return sq;
    backend_.wait_host(landings_[n - 1].done);  // the host sums what they copied
    for (size_t i = 0; i < n; ++i) {
      const Landing& l = landings_[i];
      if (l.count) sq += host_kernels_.sum_of_squares(l.host, l.n);
      if (l.copied) trace_("gradients", ExecLane::D2H, l.issued_s, static_cast<double>(l.n * sizeof(float)));
      if (l.completes) finished(*l.completes);
    }
    landings_.erase(landings_.begin(), landings_.begin() + static_cast<std::ptrdiff_t>(n));
    return sq;
  }

  float* final_norm() override { return zeroed(arena_(ArenaTensor::NormGradients), c_.hidden_size); }
  float* lm_head() override {
    return zeroed(arena_(ArenaTensor::LmHeadGradients), c_.vocab_size * c_.hidden_size);
  }
  float* head_chunk(int64_t chunk) override {
    float* g = arena_(ArenaTensor::LmHeadGradients, static_cast<int>(chunk % 2));
    if (chunk >= 2) backend_.wait(Backend::Stream::Compute, chunk_copied_[chunk % 2]);  // chunk - 2's copy out of this slot
    return zeroed(g, rows(chunk) * c_.hidden_size);
  }
  void head_chunk_done(int64_t chunk) override {
    const int64_t C = c_.hidden_size;
    float* slot = arena_(ArenaTensor::LmHeadGradients, static_cast<int>(chunk % 2));
    if (!c_.tie_word_embeddings) sum_over_ranks(slot, rows(chunk) * C);
    land(grads_->lm_head() + chunk * s_.head_chunk_rows * C, slot, rows(chunk) * C, /*count=*/false);
    chunk_copied_[chunk % 2] = landings_.back().done;
  }
  void head_done(double&) override {
    const int64_t C = c_.hidden_size, V = c_.vocab_size;
    sum_over_ranks(arena_(ArenaTensor::NormGradients), C);
    land(grads_->final_norm(), arena_(ArenaTensor::NormGradients), C, true);
    if (s_.head_chunk_rows == 0) {
      if (!c_.tie_word_embeddings) sum_over_ranks(arena_(ArenaTensor::LmHeadGradients), V * C);
      land(grads_->lm_head(), arena_(ArenaTensor::LmHeadGradients), V * C, !c_.tie_word_embeddings);
    } else {
      // The norm order as for the whole head: the lm_head over its whole host range, once
      // the chunk copies before it have landed.
      landings_.push_back({grads_->lm_head(), V * C, !c_.tie_word_embeddings, now_(),
                           backend_.record(Backend::Stream::D2H), /*copied=*/false, std::nullopt});
    }
    landings_.back().completes = UpdateTarget{UpdateTarget::Kind::Head, -1};  // the head's last part
  }

  void embedding(float* d_x0, const int32_t* ids) override {  // the plan's dx.0 crosses to the host
    backend_.copy_to_host(dx0_.data(), d_x0, static_cast<size_t>(s_.tokens * s_.hidden) * sizeof(float));
    backend_.synchronize();
    embed_backward(host_kernels_, grads_->embedding(), ids, dx0_.as<float>(), s_.tokens, c_);
  }
  void abandon() override {
    // A slot's sum still running writes the arena: wait for it (those drain() ordered are
    // waited for with the copies, abort_step). Its own error, if it has one, is dropped:
    // the step's goes on up.
    if (slot_sums_ && !pending_.empty()) {
      try {
        for (const Pending& g : pending_) slot_sums_->before_drain(g.sum);
        backend_.synchronize();  // where the copy stream waits for them
      } catch (const std::exception&) {
      }
    }
    landings_.clear();
    pending_.clear();
  }

 private:
  bool sums_slots() const override { return true; }
  void sum_over_ranks(float* slot, int64_t n) const {  // a head slot's, which drains at once
    if (slot_sums_) slot_sums_->before_drain(slot_sums_->start(UpdateTarget{UpdateTarget::Kind::Head, -1}, slot, n));
  }
  float* zeroed(float* g, int64_t n) {  // a slot's sum starts at zero
    backend_.fill_compute(g, 0, static_cast<size_t>(n) * sizeof(float));
    return g;
  }
  int64_t rows(int64_t chunk) const {
    return std::min(s_.head_chunk_rows, c_.vocab_size - chunk * s_.head_chunk_rows);
  }

  // A slot's sum reaches the host block: copied over a block zeroed for this step
  // (bitwise what accumulating in place gives), else added through staging. The copy is
  // left running (the slot lives until the barrier that waits for it, as the plan's
  // g.<j> transfer does); finish() then counts it in the norm, in production order.
  void land(float* host, const float* slot, int64_t n, bool count, std::optional<UpdateTarget> completes = {}) {
    landings_.push_back({host, n, count, now_(), Backend::Event{}, true, completes});
    if (zero_grads_) {
      backend_.copy_to_host(host, slot, static_cast<size_t>(n) * sizeof(float));
      landings_.back().done = backend_.record(Backend::Stream::D2H);
    } else {
      float* stage = grad_stage_.as<float>();
      backend_.copy_to_host(stage, slot, static_cast<size_t>(n) * sizeof(float));
      backend_.synchronize();
      for (int64_t i = 0; i < n; ++i) host[i] += stage[i];
    }
  }

  struct Landing {
    float* host;
    int64_t n;
    bool count;  // in the norm (a tied head's gradient is counted as the embedding's)
    double issued_s;
    Backend::Event done;  // recorded on the d2h stream once its copy is issued
    bool copied = true;  // false: only counts `host` in the norm once the copies before it land
    std::optional<UpdateTarget> completes;  // the target whose gradient is complete once this lands
  };
  // A layer's gradients computed, its slot waiting for the plan's drain window (in
  // production order, which the plan's drains keep).
  struct Pending {
    float* host;
    const float* slot;
    int64_t n;
    int window;
    int layer;
    int64_t sum;  // its sum's ticket (SlotSums)
  };

  const ModelConfig& c_;
  const StreamSchedule& s_;
  Backend& backend_;
  const LiveArena& arena_;
  Now now_;
  Trace trace_;
  HostBuffer dx0_, grad_stage_;
  std::vector<Landing> landings_;  // gradient copies in flight, in production order
  std::vector<Pending> pending_;
  Backend::Event chunk_copied_[2];  // the copy out of each head-chunk gradient slot
};

}  // namespace

std::unique_ptr<GradientSink> make_gradient_sink(const ModelConfig& c, const StreamSchedule& s, Backend& backend,
                                                 const LiveArena& arena, HostPool& host, GradientSink::Now now,
                                                 GradientSink::Trace trace) {
  if (backend.host_is_compute()) return std::make_unique<SumInPlace>(c, s);
  return std::make_unique<SlotAndDrain>(c, s, backend, arena, host, std::move(now), std::move(trace));
}

}  // namespace lt
