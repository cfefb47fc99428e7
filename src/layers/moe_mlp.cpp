// The sparse MoE MLP (layers/moe_mlp.h): routing, grouping by expert, per-expert GEMMs and
// the fixed-order combine; the load-balancing loss.
//
// Thread-count invariance of the GEMMs. oneDNN's fp32 GEMM below AVX-512 (its gemm:jit
// kernel: LT_CPU=avx2, and AVX2-only machines) splits a GEMM's work for the thread count
// it runs with, and the split changes the summation order. Measured with oneDNN 2.6.3 under
// LT_CPU=avx2: an expert's gate projection at the test's shape (M=128 K=128 N=96) gives
// other bits at 3 and 8 threads than at 1, in y, dx and dw alike (and so does M=256 K=512
// N=1024 at 3 threads). So this block never hands oneDNN more than one thread: each GEMM
// runs single-threaded on the calling thread's own MatmulContext (its bits then depend on
// the shape and the data only), and the parallelism is over independent GEMMs whose
// partition does not depend on the thread count: the experts (an expert's GEMMs read and
// write only its own grouped rows and its own weight and gradient slices) and fixed blocks
// of tokens for the router's logits and input gradient. The router's weight gradient sums
// over every token: it is one single-threaded GEMM, run beside the token blocks (about
// E / (3 k I) of the block's work: under 1% for Qwen3-30B-A3B's shape).
// What it costs: bench/moe_gemm_bench times these expert GEMMs against the same GEMMs run
// expert after expert on all threads. On 2 cores (AVX-512, and under LT_CPU=avx2) the two
// are within 7% either way (ours faster with 128 small experts, slower in bf16 with 8 large
// ones). With fewer experts than threads ours leaves threads idle; that machine is still
// to be measured.
#include "layers/moe_mlp.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "core/error.h"
#include "core/threads.h"
#include "kernels/cpu/swiglu.h"

namespace lt {

namespace {

constexpr size_t kAlign = 64;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

int64_t routed_rows(const MoeShape& s) { return s.tokens * s.top_k; }

// Expert e's slices of the stacked weights (and of their bf16 copies / gradients).
struct ExpertPtrs {
  int64_t C, I;
  template <typename T>
  T* gate(T* gate_up, int64_t e) const { return gate_up ? gate_up + e * 2 * I * C : nullptr; }
  template <typename T>
  T* up(T* gate_up, int64_t e) const { return gate_up ? gate_up + e * 2 * I * C + I * C : nullptr; }
  template <typename T>
  T* down(T* d, int64_t e) const { return d ? d + e * C * I : nullptr; }
};

// One MatmulContext per OpenMP thread number, created on first need and kept (the
// primitives they cache are the point), so that single-threaded GEMMs run side by side:
// the process-wide context behind kernels/cpu/linear.h serializes its callers.
std::vector<MatmulContext*> thread_contexts(int threads) {
  static std::mutex mu;
  static std::vector<std::unique_ptr<MatmulContext>> pool;
  const std::lock_guard<std::mutex> lock(mu);
  while (int(pool.size()) < threads) pool.push_back(std::make_unique<MatmulContext>());
  std::vector<MatmulContext*> out;
  for (int i = 0; i < threads; ++i) out.push_back(pool[size_t(i)].get());
  return out;
}

// Runs task(i, ctx) for i in [0, n), spread over the OpenMP threads, each task on one
// thread with oneDNN (and the kernels it calls) held to that thread. The first exception
// a task throws is rethrown here (none may leave the parallel region).
template <typename Task>
void run_single_threaded_tasks(int64_t n, Task&& task) {
  if (n <= 0) return;
  const int threads = int(std::min<int64_t>(omp_get_max_threads(), n));
  const std::vector<MatmulContext*> ctx = thread_contexts(threads);
  std::exception_ptr error;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) {
    const ScopedNumThreads one(1);  // this thread's nested regions: oneDNN's GEMM split
    try {
      task(i, *ctx[size_t(omp_get_thread_num())]);
    } catch (...) {
#pragma omp critical(lt_moe_task_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

// The linear layer of kernels/cpu/linear.h (W [N, K], Hugging Face layout) on a given
// context: the same oneDNN calls as linear_forward / linear_backward.
void lin_forward(MatmulContext& ctx, float* y, const float* x, const float* w, const bf16* wb, int64_t M, int64_t K,
                 int64_t N, Precision p) {
  ctx.run(y, MatmulOperand{x, nullptr}, false, MatmulOperand{w, wb}, true, M, N, K, false, p);
}
// dx [M, K] (=|+=) dy [M, N] W
void lin_dx(MatmulContext& ctx, float* dx, const float* dy, const float* w, const bf16* wb, int64_t M, int64_t K,
            int64_t N, bool accumulate, Precision p) {
  ctx.run(dx, MatmulOperand{dy, nullptr}, false, MatmulOperand{w, wb}, false, M, K, N, accumulate, p);
}
// dw [N, K] += dy^T x
void lin_dw(MatmulContext& ctx, float* dw, const float* dy, const float* x, int64_t M, int64_t K, int64_t N,
            Precision p) {
  ctx.run(dw, MatmulOperand{dy, nullptr}, true, MatmulOperand{x, nullptr}, false, N, K, M, true, p);
}

// Tokens per router task: a fixed block (not a share of the threads), so the blocks, and
// with them the bits, are the same for any thread count.
constexpr int64_t kRouterTokensPerTask = 256;
int64_t router_tasks(int64_t tokens) { return (tokens + kRouterTokensPerTask - 1) / kRouterTokensPerTask; }

// rows [r0, r0 + n) of a row-major [*, width] array.
template <typename T>
T* rows_at(T* base, int64_t r0, int64_t width) { return base + r0 * width; }

// Copies x[t] to dst[r] for every routed row r (token t of the grouped order).
void gather_rows(float* dst, const float* x, const MoeSaved& sv, const MoeShape& s) {
  const int64_t C = s.hidden, k = s.top_k;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < s.tokens; ++t)
    for (int64_t j = 0; j < k; ++j) std::copy_n(x + t * C, C, dst + int64_t(sv.row_of[t * k + j]) * C);
}

// Softmax of one row in fp32, max-shifted; the sum runs in index order.
void softmax_row(float* p, const float* logits, int64_t E) {
  float m = logits[0];
  for (int64_t e = 1; e < E; ++e) m = std::max(m, logits[e]);
  float sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(logits[e] - m));
  for (int64_t e = 0; e < E; ++e) p[e] /= sum;
}

// The router: probabilities, the top-k choice and its weights, per token.
void route(MoeSaved& sv, const float* logits, const MoeShape& s) {
  const int64_t E = s.experts, k = s.top_k;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < s.tokens; ++t) {
    float* p = sv.probs + t * E;
    softmax_row(p, logits + t * E, E);
    int32_t* chosen = sv.experts + t * k;
    float* w = sv.weights + t * k;
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e) {
        if (std::find(chosen, chosen + j, int32_t(e)) != chosen + j) continue;
        if (best < 0 || p[e] > p[best]) best = e;  // strict: a tie keeps the lower index
      }
      chosen[j] = int32_t(best);
      sum += (w[j] = p[best]);
    }
    if (s.norm_topk_prob)
      for (int64_t j = 0; j < k; ++j) w[j] /= sum;
  }
}

// A stable counting sort of the routed rows by expert: offsets and row_of.
void group_by_expert(MoeSaved& sv, const MoeShape& s) {
  const int64_t E = s.experts, n = routed_rows(s);
  std::fill_n(sv.offsets, E + 1, 0);
  for (int64_t i = 0; i < n; ++i) ++sv.offsets[sv.experts[i] + 1];
  for (int64_t e = 0; e < E; ++e) sv.offsets[e + 1] += sv.offsets[e];
  std::vector<int32_t> next(sv.offsets, sv.offsets + E);
  for (int64_t i = 0; i < n; ++i) sv.row_of[i] = next[size_t(sv.experts[i])]++;
}

// dst[t] = (accumulate ? dst[t] : 0) + sum_j scale_j * src[row_of[t, j]], j in order
// (scale null: 1). One thread per token, so the order is fixed.
void combine_rows(float* dst, const float* src, const float* scale, bool accumulate,
                  const MoeSaved& sv, const MoeShape& s) {
  const int64_t C = s.hidden, k = s.top_k;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < s.tokens; ++t) {
    float* d = dst + t * C;
    if (!accumulate) std::fill_n(d, C, 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const float* r = src + int64_t(sv.row_of[t * k + j]) * C;
      const float a = scale ? scale[t * k + j] : 1.0f;
      for (int64_t c = 0; c < C; ++c) d[c] += a * r[c];
    }
  }
}

}  // namespace

void moe_check_shape(const MoeShape& s) {
  const std::string where = "MoE MLP (T=" + std::to_string(s.tokens) + " C=" + std::to_string(s.hidden) +
                            " E=" + std::to_string(s.experts) + " top_k=" + std::to_string(s.top_k) +
                            " I=" + std::to_string(s.intermediate) + ")";
  if (s.experts < 1 || s.hidden < 1 || s.intermediate < 1 || s.tokens < 0)
    throw Error("non-positive size", where,
                "num_experts, hidden_size and moe_intermediate_size must be at least 1");
  if (s.top_k < 1 || s.top_k > s.experts)
    throw Error("num_experts_per_tok = " + std::to_string(s.top_k) + " is not in [1, num_experts = " +
                    std::to_string(s.experts) + "]",
                where, "set num_experts_per_tok to at most the number of experts");
  if (s.tokens * s.top_k >= (int64_t(1) << 31))
    throw Error("tokens * num_experts_per_tok does not fit the int32 row index", where,
                "run fewer tokens per step");
}

size_t moe_saved_bytes(const MoeShape& s) {
  const size_t T = size_t(s.tokens), E = size_t(s.experts), k = size_t(s.top_k), n = T * k,
               I = size_t(s.intermediate);
  return aligned(T * E * 4) + aligned(n * 4) + aligned(n * 4) + aligned((E + 1) * 4) + aligned(n * 4) +
         3 * aligned(n * I * 4);
}

MoeSaved moe_bind_saved(void* buf, const MoeShape& s) {
  LT_ASSERT(reinterpret_cast<uintptr_t>(buf) % kAlign == 0, "MoE saved buffer not 64-byte aligned");
  const size_t T = size_t(s.tokens), E = size_t(s.experts), k = size_t(s.top_k), n = T * k,
               I = size_t(s.intermediate);
  char* p = static_cast<char*>(buf);
  auto take = [&](size_t bytes) {
    char* r = p;
    p += aligned(bytes);
    return r;
  };
  MoeSaved sv;
  sv.probs = reinterpret_cast<float*>(take(T * E * 4));
  sv.weights = reinterpret_cast<float*>(take(n * 4));
  sv.experts = reinterpret_cast<int32_t*>(take(n * 4));
  sv.offsets = reinterpret_cast<int32_t*>(take((E + 1) * 4));
  sv.row_of = reinterpret_cast<int32_t*>(take(n * 4));
  sv.gate = reinterpret_cast<float*>(take(n * I * 4));
  sv.up = reinterpret_cast<float*>(take(n * I * 4));
  sv.act = reinterpret_cast<float*>(take(n * I * 4));
  return sv;
}

size_t moe_workspace_floats(const MoeShape& s) {
  const size_t n = size_t(routed_rows(s)), C = size_t(s.hidden), I = size_t(s.intermediate),
               TE = size_t(s.tokens * s.experts);
  const size_t forward = TE + 2 * n * C;                 // logits, gathered h, expert outputs
  const size_t backward = 3 * n * C + 3 * n * I + TE + n;  // see moe_backward
  return std::max(forward, backward);
}

void moe_forward(float* out, MoeSaved& sv, const float* h, const MoeWeights& w,
                 const MoeWeightsBf16& wb, const MoeShape& s, Precision precision, float* ws) {
  moe_check_shape(s);
  if (s.tokens == 0) return;
  const int64_t T = s.tokens, C = s.hidden, E = s.experts, I = s.intermediate;
  const ExpertPtrs ep{C, I};
  float* logits = ws;
  float* xg = logits + T * E;
  float* ye = xg + routed_rows(s) * C;

  run_single_threaded_tasks(router_tasks(T), [&](int64_t i, MatmulContext& ctx) {
    const int64_t t0 = i * kRouterTokensPerTask, n = std::min(kRouterTokensPerTask, T - t0);
    lin_forward(ctx, rows_at(logits, t0, E), rows_at(h, t0, C), w.router, wb.router, n, C, E, precision);
  });
  route(sv, logits, s);
  group_by_expert(sv, s);
  gather_rows(xg, h, sv, s);
  run_single_threaded_tasks(E, [&](int64_t e, MatmulContext& ctx) {
    const int64_t r0 = sv.offsets[e], n = sv.offsets[e + 1] - r0;
    if (n == 0) return;
    float* gate = rows_at(sv.gate, r0, I);
    float* up = rows_at(sv.up, r0, I);
    float* act = rows_at(sv.act, r0, I);
    const float* x = rows_at(xg, r0, C);
    lin_forward(ctx, gate, x, ep.gate(w.gate_up, e), ep.gate(wb.gate_up, e), n, C, I, precision);
    lin_forward(ctx, up, x, ep.up(w.gate_up, e), ep.up(wb.gate_up, e), n, C, I, precision);
    swiglu_forward(act, gate, up, n * I);
    lin_forward(ctx, rows_at(ye, r0, C), act, ep.down(w.down, e), ep.down(wb.down, e), n, I, C, precision);
  });
  combine_rows(out, ye, sv.weights, false, sv, s);
}

void moe_backward(float* dh, MoeGrads& g, const float* d_out, const float* h, const MoeWeights& w,
                  const MoeWeightsBf16& wb, const MoeSaved& sv, const float* d_logits_extra,
                  const MoeShape& s, Precision precision, float* ws) {
  moe_check_shape(s);
  if (s.tokens == 0) return;
  const int64_t T = s.tokens, C = s.hidden, E = s.experts, I = s.intermediate, k = s.top_k,
                N = routed_rows(s);
  const ExpertPtrs ep{C, I};
  float* dy = ws;            // [N, C] d_out per routed row, then times its weight
  float* xg = dy + N * C;    // [N, C] h per routed row
  float* dxe = xg + N * C;   // [N, C] the experts' input gradients
  float* dact = dxe + N * C; // [N, I] d(act) without the weight, then with it
  float* dgate = dact + N * I;
  float* dup = dgate + N * I;
  float* dlogits = dup + N * I;  // [T, E]
  float* dweight = dlogits + T * E;  // [N] d out / d w per routed row

  // down: out[t] = sum_j w_j ye_j, ye = act down^T. d ye_j = w_j d_out[t]; the weight's
  // gradient is d_out[t] . ye_j = (d_out[t] down) . act_j, so one GEMM on the unweighted
  // d_out gives both (no division by w, no saved ye).
  gather_rows(dy, d_out, sv, s);
  gather_rows(xg, h, sv, s);
  std::vector<float> weight_of(static_cast<size_t>(N));  // the routing weight of each grouped row
  for (int64_t i = 0; i < N; ++i) weight_of[size_t(sv.row_of[i])] = sv.weights[i];
  run_single_threaded_tasks(E, [&](int64_t e, MatmulContext& ctx) {
    const int64_t r0 = sv.offsets[e], n = sv.offsets[e + 1] - r0;
    if (n == 0) return;
    float* dy_e = rows_at(dy, r0, C);
    float* dact_e = rows_at(dact, r0, I);
    const float* act_e = rows_at(sv.act, r0, I);
    lin_dx(ctx, dact_e, dy_e, ep.down(w.down, e), ep.down(wb.down, e), n, I, C, false, precision);
    for (int64_t r = r0; r < r0 + n; ++r) {
      const float* a = sv.act + r * I;
      float* da = dact + r * I;
      float dot = 0;
      for (int64_t i = 0; i < I; ++i) dot += da[i] * a[i];
      dweight[r] = dot;
      const float wr = weight_of[size_t(r)];
      for (int64_t i = 0; i < I; ++i) da[i] *= wr;
      for (int64_t c = 0; c < C; ++c) dy[r * C + c] *= wr;
    }
    lin_dw(ctx, ep.down(g.down, e), dy_e, act_e, n, I, C, precision);

    // gate and up
    float* dgate_e = rows_at(dgate, r0, I);
    float* dup_e = rows_at(dup, r0, I);
    swiglu_backward(dgate_e, dup_e, dact_e, rows_at(sv.gate, r0, I), rows_at(sv.up, r0, I), n * I);
    const float* x = rows_at(xg, r0, C);
    float* dx_e = rows_at(dxe, r0, C);
    lin_dx(ctx, dx_e, dgate_e, ep.gate(w.gate_up, e), ep.gate(wb.gate_up, e), n, C, I, false, precision);
    lin_dw(ctx, ep.gate(g.gate_up, e), dgate_e, x, n, C, I, precision);
    lin_dx(ctx, dx_e, dup_e, ep.up(w.gate_up, e), ep.up(wb.gate_up, e), n, C, I, true, precision);
    lin_dw(ctx, ep.up(g.gate_up, e), dup_e, x, n, C, I, precision);
  });

  // router: the weights' gradient into the probabilities (through the renormalization
  // w_j = p_j / S: dp_j = (dw_j - sum_i dw_i w_i) / S), then through the softmax.
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const float* p = sv.probs + t * E;
    float* dl = dlogits + t * E;
    std::fill_n(dl, E, 0.0f);  // dp first
    float wdot = 0, psum = 0;
    for (int64_t j = 0; j < k; ++j) {
      wdot += dweight[sv.row_of[t * k + j]] * sv.weights[t * k + j];
      psum += p[sv.experts[t * k + j]];
    }
    for (int64_t j = 0; j < k; ++j) {
      const float dw = dweight[sv.row_of[t * k + j]];
      dl[sv.experts[t * k + j]] = s.norm_topk_prob ? (dw - wdot) / psum : dw;
    }
    float pdot = 0;
    for (int64_t e = 0; e < E; ++e) pdot += p[e] * dl[e];
    for (int64_t e = 0; e < E; ++e) {
      dl[e] = p[e] * (dl[e] - pdot);
      if (d_logits_extra) dl[e] += d_logits_extra[t * E + e];
    }
  }
  // Task 0: the router's weight gradient (a sum over all tokens, so one GEMM); the others:
  // dh for a block of tokens each.
  run_single_threaded_tasks(1 + router_tasks(T), [&](int64_t i, MatmulContext& ctx) {
    if (i == 0) return lin_dw(ctx, g.router, dlogits, h, T, C, E, precision);
    const int64_t t0 = (i - 1) * kRouterTokensPerTask, n = std::min(kRouterTokensPerTask, T - t0);
    lin_dx(ctx, rows_at(dh, t0, C), rows_at(dlogits, t0, E), w.router, wb.router, n, C, E, false, precision);
  });
  combine_rows(dh, dxe, nullptr, true, sv, s);
}

void moe_aux_accumulate(MoeAuxStats& st, const MoeSaved& sv, const float* mask, const MoeShape& s) {
  LT_ASSERT(int64_t(st.choices.size()) == s.experts, "MoeAuxStats made for another expert count");
  const int64_t E = s.experts, k = s.top_k;
  for (int64_t t = 0; t < s.tokens; ++t) {
    const double m = mask ? mask[t] : 1.0;
    for (int64_t j = 0; j < k; ++j) st.choices[size_t(sv.experts[t * k + j])] += m;
    for (int64_t e = 0; e < E; ++e) st.prob_sum[size_t(e)] += m * sv.probs[t * E + e];
    st.rows += m;
  }
}

double moe_aux_loss(const MoeAuxStats& st) {
  if (st.rows == 0) return 0;
  double sum = 0;
  for (size_t e = 0; e < st.choices.size(); ++e) sum += st.choices[e] * st.prob_sum[e];
  return double(st.choices.size()) * sum / (st.rows * st.rows);
}

void moe_aux_backward(float* d_logits, const MoeSaved& sv, const float* mask, const MoeAuxStats& totals,
                      float scale, const MoeShape& s) {
  LT_ASSERT(int64_t(totals.choices.size()) == s.experts, "MoeAuxStats made for another expert count");
  if (totals.rows == 0) return;
  const int64_t E = s.experts;
  // d aux / d p[t, e] = E * m[t] * choices_e / R^2
  std::vector<double> dp(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e)
    dp[size_t(e)] = double(scale) * double(E) * totals.choices[size_t(e)] / (totals.rows * totals.rows);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < s.tokens; ++t) {
    const double m = mask ? mask[t] : 1.0;
    if (m == 0) continue;
    const float* p = sv.probs + t * E;
    double pdot = 0;
    for (int64_t e = 0; e < E; ++e) pdot += p[e] * dp[size_t(e)];
    for (int64_t e = 0; e < E; ++e) d_logits[t * E + e] += float(m * p[e] * (dp[size_t(e)] - pdot));
  }
}

}  // namespace lt
