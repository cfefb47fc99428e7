// The sparse MoE MLP (exec/moe_mlp.h): routing, grouping by expert, per-expert GEMMs and
// the fixed-order combine; the load-balancing loss.
#include "exec/moe_mlp.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "kernels/cpu/linear.h"
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

  linear_forward(logits, h, w.router, wb.router, nullptr, T, C, E, precision);
  route(sv, logits, s);
  group_by_expert(sv, s);
  gather_rows(xg, h, sv, s);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = sv.offsets[e], n = sv.offsets[e + 1] - r0;
    if (n == 0) continue;
    linear_forward(rows_at(sv.gate, r0, I), rows_at(xg, r0, C), ep.gate(w.gate_up, e), ep.gate(wb.gate_up, e),
                   nullptr, n, C, I, precision);
    linear_forward(rows_at(sv.up, r0, I), rows_at(xg, r0, C), ep.up(w.gate_up, e), ep.up(wb.gate_up, e), nullptr,
                   n, C, I, precision);
  }
  swiglu_forward(sv.act, sv.gate, sv.up, routed_rows(s) * I);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = sv.offsets[e], n = sv.offsets[e + 1] - r0;
    if (n == 0) continue;
    linear_forward(rows_at(ye, r0, C), rows_at(sv.act, r0, I), ep.down(w.down, e), ep.down(wb.down, e), nullptr, n,
                   I, C, precision);
  }
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
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = sv.offsets[e], n = sv.offsets[e + 1] - r0;
    if (n == 0) continue;
    linear_backward(rows_at(dact, r0, I), nullptr, nullptr, rows_at(dy, r0, C), nullptr, ep.down(w.down, e),
                    ep.down(wb.down, e), n, I, C, false, precision);
  }
  std::vector<float> weight_of(static_cast<size_t>(N));  // the routing weight of each grouped row
  for (int64_t i = 0; i < N; ++i) weight_of[size_t(sv.row_of[i])] = sv.weights[i];
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r) {
    const float* a = sv.act + r * I;
    float* da = dact + r * I;
    float dot = 0;
    for (int64_t i = 0; i < I; ++i) dot += da[i] * a[i];
    dweight[r] = dot;
    const float wr = weight_of[size_t(r)];
    for (int64_t i = 0; i < I; ++i) da[i] *= wr;
    for (int64_t c = 0; c < C; ++c) dy[r * C + c] *= wr;
  }
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = sv.offsets[e], n = sv.offsets[e + 1] - r0;
    if (n == 0) continue;
    linear_backward(nullptr, ep.down(g.down, e), nullptr, rows_at(dy, r0, C), rows_at(sv.act, r0, I),
                    ep.down(w.down, e), ep.down(wb.down, e), n, I, C, false, precision);
  }

  // gate and up
  swiglu_backward(dgate, dup, dact, sv.gate, sv.up, N * I);
  gather_rows(xg, h, sv, s);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = sv.offsets[e], n = sv.offsets[e + 1] - r0;
    if (n == 0) continue;
    linear_backward(rows_at(dxe, r0, C), ep.gate(g.gate_up, e), nullptr, rows_at(dgate, r0, I), rows_at(xg, r0, C),
                    ep.gate(w.gate_up, e), ep.gate(wb.gate_up, e), n, C, I, false, precision);
    linear_backward(rows_at(dxe, r0, C), ep.up(g.gate_up, e), nullptr, rows_at(dup, r0, I), rows_at(xg, r0, C),
                    ep.up(w.gate_up, e), ep.up(wb.gate_up, e), n, C, I, true, precision);
  }

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
  linear_backward(dh, g.router, nullptr, dlogits, h, w.router, wb.router, T, C, E, false, precision);
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
