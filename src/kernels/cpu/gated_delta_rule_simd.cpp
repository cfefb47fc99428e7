// Gated delta rule kernels (kernels/cpu/gated_delta_rule.h), compiled once per ISA level
// (core/isa_target.h): plain loops over dk / dv that the compiler vectorizes, threaded
// over (batch, head) tasks, each with its own slice of the caller's workspace.
//
// Notation inside a chunk of n tokens (rows r, s): qc, kc the normalized (and for q,
// scaled) rows; G the cumulative g (a LogDecay); e_r = exp(G_r); w_r = exp(G_last - G_r);
// D[r,s] = exp(G_r - G_s) (s <= r); P = (qc kc^T) .* D and KKD = (kc kc^T) .* D (lower
// triangles); L[r,s] = beta_r KKD[r,s] (s < r); Delta solves (I + L) Delta = R with
// R_r = beta_r (v_r - e_r S0^T kc_r).
#include "kernels/cpu/gated_delta_rule.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu/vec_math.h"

#include "core/isa_target.h"

namespace lt::LT_ISA_NS {

namespace {

constexpr float kL2Eps = 1e-6f;  // transformers' l2norm eps (inside the square root)

struct Rows {  // where token t of (b, head) lives in the [B, S, H, D] tensors
  const GatedDeltaShape& s;
  int64_t qk(int64_t b, int64_t t, int64_t hk) const { return ((b * s.seq + t) * s.k_heads + hk) * s.k_dim; }
  int64_t v(int64_t b, int64_t t, int64_t h) const { return ((b * s.seq + t) * s.v_heads + h) * s.v_dim; }
  int64_t gate(int64_t b, int64_t t, int64_t h) const { return (b * s.seq + t) * s.v_heads + h; }
  int64_t state(int64_t b, int64_t h) const { return (b * s.v_heads + h) * s.k_dim * s.v_dim; }
  int64_t chunk_state(int64_t b, int64_t h, int64_t c) const {
    return ((b * s.v_heads + h) * s.n_chunks() + c) * s.k_dim * s.v_dim;
  }
};

inline float dot(const float* a, const float* b, int64_t n) {
  float acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

inline void axpy(float* y, float a, const float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// The chunk's matrix products go through row_times and rows_times, in the form
// out[r, :] (+)= sum_i a[r, i] b[i, :] (on transposed operands where the product needs
// it): vectorized over the output's columns, a block of
// kColBlock of them held in registers for the whole sum over i. The dot-product form
// (one horizontal sum per output element, and every (r, s) pair of a 64-row chunk has
// two or three of them) made the backward four times the forward.
constexpr int64_t kColBlock = 64;

template <bool kFull>
inline void row_block(float* out, const float* a, const float* b, int64_t ldb, int64_t inner, int64_t width,
                      bool accumulate) {
  const int64_t w = kFull ? kColBlock : width;
  float acc[kColBlock];
#pragma omp simd
  for (int64_t c = 0; c < w; ++c) acc[c] = accumulate ? out[c] : 0.0f;
  for (int64_t i = 0; i < inner; ++i) {
    const float ai = a[i];
    const float* bi = b + i * ldb;
#pragma omp simd
    for (int64_t c = 0; c < w; ++c) acc[c] += ai * bi[c];
  }
#pragma omp simd
  for (int64_t c = 0; c < w; ++c) out[c] = acc[c];
}

// out[0, cols) (+)= sum_{i < inner} a[i] b[i * ldb + 0, cols): one row. Out of line on
// purpose: inlined into the large chunk functions, GCC kept the accumulators on the stack
// (measured, 1 thread, the bench layer shape: forward 23.5 ms against 15.9, backward 62
// against 42).
[[gnu::noinline]] void row_times(float* out, const float* a, const float* b, int64_t ldb, int64_t inner,
                                 int64_t cols, bool accumulate) {
  int64_t c0 = 0;
  for (; c0 + kColBlock <= cols; c0 += kColBlock)
    row_block<true>(out + c0, a, b + c0, ldb, inner, kColBlock, accumulate);
  if (c0 < cols) row_block<false>(out + c0, a, b + c0, ldb, inner, cols - c0, accumulate);
}

// out (rows x cols, row stride ldo) (+)= a (rows x inner, lda) b (inner x cols, ldb).
inline void rows_times(float* out, int64_t ldo, const float* a, int64_t lda, const float* b, int64_t ldb,
                       int64_t rows, int64_t inner, int64_t cols, bool accumulate) {
  for (int64_t r = 0; r < rows; ++r) row_times(out + r * ldo, a + r * lda, b, ldb, inner, cols, accumulate);
}

// dst[c, r] = src[r, c] * (scale ? scale[r] : 1): a (rows x cols) block transposed.
inline void transpose(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols,
                      const float* scale = nullptr) {
  for (int64_t r = 0; r < rows; ++r) {
    const float f = scale ? scale[r] : 1.0f;
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c] * f;
  }
}

// The in-chunk cumulative log decay G_r = sum_{t<=r} g_t, accumulated in double and kept
// as the unevaluated sum hi + lo of two floats. Why: under strong decay (Qwen3.5 initialises
// A = exp(A_log) up to 16, so g reaches -20 per token) G falls to about -1000 within a
// 64-token chunk, where neighbouring floats are 6e-5 apart. Every decay the kernel takes is
// exp(G_r - G_s); a difference of two rounded floats (or of a float running sum, whose
// error grows with r) would put that absolute error into the exponent: a relative error of
// |G| u or worse in a decay that may well be O(1). With the split, hi_r - hi_s is exact
// whenever the decay is not negligible (then hi_r, hi_s are within a factor 2: Sterbenz),
// and lo carries what hi dropped, so the exponent is as accurate as g itself.
struct LogDecay {
  float* hi;
  float* lo;
  void accumulate(const float* g, const Rows& at, int64_t b, int64_t h, int64_t t0, int64_t n) {
    double acc = 0;
    for (int64_t r = 0; r < n; ++r) {
      acc += g[at.gate(b, t0 + r, h)];
      hi[r] = float(acc);
      lo[r] = float(acc - double(hi[r]));
    }
  }
  float at(int64_t r) const { return hi[r] + lo[r]; }
  float minus(int64_t r, int64_t s) const { return (hi[r] - hi[s]) + (lo[r] - lo[s]); }
};

// The chunk's normalized rows: qc = l2norm(q) * scale, kc = l2norm(k); rq, rk (nullable)
// get the inverse norms 1/sqrt(|x|^2 + eps).
void load_qk(float* qc, float* kc, float* rq, float* rk, const float* q, const float* k,
             const Rows& at, int64_t b, int64_t hk, int64_t t0, int64_t n, float scale) {
  const int64_t dk = at.s.k_dim;
  for (int64_t r = 0; r < n; ++r) {
    const float* qr = q + at.qk(b, t0 + r, hk);
    const float* kr = k + at.qk(b, t0 + r, hk);
    const float iq = 1.0f / std::sqrt(dot(qr, qr, dk) + kL2Eps);
    const float ik = 1.0f / std::sqrt(dot(kr, kr, dk) + kL2Eps);
    if (rq) rq[r] = iq, rk[r] = ik;
    const float sq = iq * scale;
#pragma omp simd
    for (int64_t i = 0; i < dk; ++i) {
      qc[r * dk + i] = qr[i] * sq;
      kc[r * dk + i] = kr[i] * ik;
    }
  }
}

// G (cumulative g), D, P, KKD for the chunk (row stride C). D, P and KKD are whole n x n
// matrices, zero above the diagonal, so the products below can run over full rows: a
// 64-wide row in registers costs less than the triangle it saves.
void chunk_matrices(LogDecay& G, float* D, float* P, float* KKD, float* kT, const float* qc, const float* kc,
                    const float* g, const Rows& at, int64_t b, int64_t h, int64_t t0, int64_t n) {
  const int64_t C = at.s.chunk, dk = at.s.k_dim;
  G.accumulate(g, at, b, h, t0, n);
  transpose(kT, C, kc, dk, n, dk);
  for (int64_t r = 0; r < n; ++r) {
    float *Dr = D + r * C, *Pr = P + r * C, *Kr = KKD + r * C;
    const float hr = G.hi[r], lr = G.lo[r];
#pragma omp simd
    for (int64_t s = 0; s <= r; ++s) Dr[s] = vec::exp_approx((hr - G.hi[s]) + (lr - G.lo[s]));
    for (int64_t s = r + 1; s < n; ++s) Dr[s] = 0;
    row_times(Pr, qc + r * dk, kT, C, dk, n, false);
    row_times(Kr, kc + r * dk, kT, C, dk, n, false);
#pragma omp simd
    for (int64_t s = 0; s < n; ++s) {
      Pr[s] *= Dr[s];
      Kr[s] *= Dr[s];
    }
  }
}

// Delta (n x dv): (I + L) Delta = R, R_r = beta_r (v_r - e_r S0^T kc_r), by substitution:
// Delta_r = beta_r (v_r - e_r S0^T kc_r - sum_{s<r} KKD[r,s] Delta_s).
void solve_delta(float* Dl, const float* KKD, const float* kc, const LogDecay& G, const float* S0,
                 const float* v, const float* beta, const Rows& at, int64_t b, int64_t h,
                 int64_t t0, int64_t n) {
  const int64_t C = at.s.chunk, dk = at.s.k_dim, dv = at.s.v_dim;
  rows_times(Dl, dv, kc, dk, S0, dv, n, dk, dv, false);  // S0^T kc_r
  for (int64_t r = 0; r < n; ++r) {
    float* dr = Dl + r * dv;
    const float br = beta[at.gate(b, t0 + r, h)];
    const float er = vec::exp_approx(G.at(r));
    const float* vr = v + at.v(b, t0 + r, h);
#pragma omp simd
    for (int64_t j = 0; j < dv; ++j) dr[j] *= er;
    row_times(dr, KKD + r * C, Dl, dv, r, dv, true);
#pragma omp simd
    for (int64_t j = 0; j < dv; ++j) dr[j] = br * (vr[j] - dr[j]);
  }
}

struct ForwardScratch {
  float *qc, *kc, *D, *P, *KKD, *Dl, *S, *kT, *coef;
  LogDecay G;
  ForwardScratch(float* w, const GatedDeltaShape& s) {
    const int64_t C = s.chunk, dk = s.k_dim, dv = s.v_dim;
    qc = w, w += C * dk;
    kc = w, w += C * dk;
    G.hi = w, w += C;
    G.lo = w, w += C;
    D = w, w += C * C;
    P = w, w += C * C;
    KKD = w, w += C * C;
    Dl = w, w += C * dv;
    S = w, w += dk * dv;
    kT = w, w += dk * C;
    coef = w, w += C;
  }
};

void forward(float* out, float* final_state, float* chunk_states, const float* q, const float* k,
             const float* v, const float* g, const float* beta, const float* initial_state,
             const GatedDeltaShape& s, float* workspace) {
  const Rows at{s};
  const int64_t C = s.chunk, dk = s.k_dim, dv = s.v_dim, grp = s.v_heads / s.k_heads;
  const int64_t tasks = s.batch * s.v_heads, NC = s.n_chunks(), ldo = s.v_heads * dv;
  const float scale = float(1.0 / std::sqrt(double(dk)));
#pragma omp parallel for schedule(dynamic, 1) if (tasks > 1)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t b = task / s.v_heads, h = task % s.v_heads, hk = h / grp;
    ForwardScratch w(workspace + task * gdr::forward_task_floats(s), s);
    if (initial_state)
      std::memcpy(w.S, initial_state + at.state(b, h), size_t(dk * dv) * sizeof(float));
    else
      std::memset(w.S, 0, size_t(dk * dv) * sizeof(float));
    for (int64_t c = 0; c < NC; ++c) {
      const int64_t t0 = c * C, n = std::min(C, s.seq - t0);
      if (chunk_states)
        std::memcpy(chunk_states + at.chunk_state(b, h, c), w.S, size_t(dk * dv) * sizeof(float));
      load_qk(w.qc, w.kc, nullptr, nullptr, q, k, at, b, hk, t0, n, scale);
      chunk_matrices(w.G, w.D, w.P, w.KKD, w.kT, w.qc, w.kc, g, at, b, h, t0, n);
      solve_delta(w.Dl, w.KKD, w.kc, w.G, w.S, v, beta, at, b, h, t0, n);
      // o_r = e_r S0^T qc_r + sum_{s<=r} P[r,s] Delta_s
      float* o = out + at.v(b, t0, h);
      rows_times(o, ldo, w.qc, dk, w.S, dv, n, dk, dv, false);
      for (int64_t r = 0; r < n; ++r) {
        const float er = vec::exp_approx(w.G.at(r));
#pragma omp simd
        for (int64_t j = 0; j < dv; ++j) o[r * ldo + j] *= er;
      }
      rows_times(o, ldo, w.P, C, w.Dl, dv, n, n, dv, true);
      // S1 = exp(G_last) S0 + sum_r w_r kc_r Delta_r^T
      const float E = vec::exp_approx(w.G.at(n - 1));
#pragma omp simd
      for (int64_t i = 0; i < dk * dv; ++i) w.S[i] *= E;
      for (int64_t r = 0; r < n; ++r) w.coef[r] = vec::exp_approx(w.G.minus(n - 1, r));
      transpose(w.kT, C, w.kc, dk, n, dk, w.coef);
      rows_times(w.S, dv, w.kT, C, w.Dl, dv, dk, n, dv, true);
    }
    if (final_state)
      std::memcpy(final_state + at.state(b, h), w.S, size_t(dk * dv) * sizeof(float));
  }
}

struct BackwardScratch : ForwardScratch {
  float *dqc, *dkc, *rq, *rk, *dG, *e, *wl, *colsum, *dDl, *dR, *A, *Bm, *Cm, *Mp, *Mb;
  float *S0T, *dST, *qeT, *kbT, *DlT, *T1;  // transposed operands of the products
  float* dS;
  BackwardScratch(float* w, const GatedDeltaShape& s) : ForwardScratch(w, s) {
    const int64_t C = s.chunk, dk = s.k_dim, dv = s.v_dim;
    w += gdr::forward_task_floats(s);
    dqc = w, w += C * dk;
    dkc = w, w += C * dk;
    rq = w, w += C;
    rk = w, w += C;
    dG = w, w += C;
    e = w, w += C;
    wl = w, w += C;
    colsum = w, w += C;
    dDl = w, w += C * dv;
    dR = w, w += C * dv;
    A = w, w += C * dk;
    Bm = w, w += C * dk;
    Cm = w, w += C * dk;
    Mp = w, w += C * C;
    Mb = w, w += C * C;
    S0T = w, w += dv * dk;
    dST = w, w += dv * dk;
    qeT = w, w += dk * C;
    kbT = w, w += dk * C;
    DlT = w, w += dv * C;
    T1 = w, w += C * C;
    dS = w;  // grp x [dk, dv]
  }
};

// One value head's backward through one chunk. dS holds dL/dS1 on entry and dL/dS0 on exit;
// dqc, dkc accumulate (normalized space); dv, dbeta, dg rows are written.
void backward_chunk_head(BackwardScratch& w, float* dS, float* dv_out, float* dg, float* dbeta,
                         const float* d_out, const float* v, const float* g, const float* beta,
                         const float* S0, const Rows& at, int64_t b, int64_t h, int64_t t0,
                         int64_t n) {
  const GatedDeltaShape& s = at.s;
  const int64_t C = s.chunk, dk = s.k_dim, dv = s.v_dim, ldo = s.v_heads * dv;
  chunk_matrices(w.G, w.D, w.P, w.KKD, w.kT, w.qc, w.kc, g, at, b, h, t0, n);
  solve_delta(w.Dl, w.KKD, w.kc, w.G, S0, v, beta, at, b, h, t0, n);
  const float E = vec::exp_approx(w.G.at(n - 1));
  for (int64_t r = 0; r < n; ++r) {
    w.e[r] = vec::exp_approx(w.G.at(r));
    w.wl[r] = vec::exp_approx(w.G.minus(n - 1, r));
    w.dG[r] = 0;
    w.colsum[r] = 0;
  }
  const float* dO0 = d_out + at.v(b, t0, h);  // dO_r = dO0 + r * ldo
  auto beta_at = [&](int64_t r) { return beta[at.gate(b, t0 + r, h)]; };

  // dDelta_s = w_s dS1^T kc_s + sum_{r>=s} P[r,s] dO_r
  rows_times(w.dDl, dv, w.kc, dk, dS, dv, n, dk, dv, false);
  for (int64_t r = 0; r < n; ++r) {
#pragma omp simd
    for (int64_t j = 0; j < dv; ++j) w.dDl[r * dv + j] *= w.wl[r];
  }
  transpose(w.T1, C, w.P, C, n, n);
  rows_times(w.dDl, dv, w.T1, C, dO0, ldo, n, n, dv, true);
  // (I + L)^T dR = dDelta, back substitution: dR_t = dDelta_t - sum_{r>t} beta_r KKD[r,t] dR_r
  for (int64_t t = n - 1; t >= 0; --t) {
    float* dr = w.dR + t * dv;
    std::memcpy(dr, w.dDl + t * dv, size_t(dv) * sizeof(float));
    for (int64_t r = t + 1; r < n; ++r) w.coef[r] = -beta_at(r) * w.KKD[r * C + t];
    row_times(dr, w.coef + t + 1, w.dR + (t + 1) * dv, dv, n - t - 1, dv, true);
  }
  // A_r = S0 dO_r, Bm_r = S0 dR_r, Cm_r = dS1 Delta_r
  transpose(w.S0T, dk, S0, dv, dk, dv);
  transpose(w.dST, dk, dS, dv, dk, dv);
  rows_times(w.A, dk, dO0, ldo, w.S0T, dk, n, dv, dk, false);
  rows_times(w.Bm, dk, w.dR, dv, w.S0T, dk, n, dv, dk, false);
  rows_times(w.Cm, dk, w.Dl, dv, w.dST, dk, n, dv, dk, false);
  float dGlast = E * dot(S0, dS, dk * dv);
  // dS0 = E dS1 + sum_r e_r (qc_r dO_r^T - beta_r kc_r dR_r^T), in place
#pragma omp simd
  for (int64_t i = 0; i < dk * dv; ++i) dS[i] *= E;
  for (int64_t r = 0; r < n; ++r) w.coef[r] = -beta_at(r) * w.e[r];
  transpose(w.qeT, C, w.qc, dk, n, dk, w.e);
  transpose(w.kbT, C, w.kc, dk, n, dk, w.coef);
  rows_times(dS, dv, w.qeT, C, dO0, ldo, dk, n, dv, true);
  rows_times(dS, dv, w.kbT, C, w.dR, dv, dk, n, dv, true);
  // The pair matrices' raw products: Mp[r,s] = dO_r . Delta_s, Mb[r,s] = dR_r . Delta_s.
  transpose(w.DlT, C, w.Dl, dv, n, dv);
  rows_times(w.Mp, C, dO0, ldo, w.DlT, C, n, dv, n, false);
  rows_times(w.Mb, C, w.dR, dv, w.DlT, C, n, dv, n, false);
  // Per-row terms, and the two pair matrices in place:
  //   Mp[r,s] = D[r,s] (dO_r . Delta_s)               (s <= r): from P
  //   Mb[r,s] = -beta_r D[r,s] (dR_r . Delta_s)       (s < r):  from L
  // each zero elsewhere.
  for (int64_t r = 0; r < n; ++r) {
    const float br = beta_at(r), er = w.e[r], wr = w.wl[r];
    const float* qr = w.qc + r * dk;
    const float* kr = w.kc + r * dk;
    const float* vr = v + at.v(b, t0 + r, h);
    const float* dRr = w.dR + r * dv;
    float* dq = w.dqc + r * dk;
    float* dkr = w.dkc + r * dk;
    // from e_r S0^T qc_r
    axpy(dq, er, w.A + r * dk, dk);
    w.dG[r] += er * dot(qr, w.A + r * dk, dk);
    // from S1's w_r kc_r Delta_r^T
    axpy(dkr, wr, w.Cm + r * dk, dk);
    const float kc_c = wr * dot(kr, w.Cm + r * dk, dk);
    dGlast += kc_c;
    w.dG[r] -= kc_c;
    // from R_r = beta_r (v_r - e_r S0^T kc_r)
    float* dvr = dv_out + at.v(b, t0 + r, h);
#pragma omp simd
    for (int64_t j = 0; j < dv; ++j) dvr[j] = br * dRr[j];
    const float kb = er * dot(kr, w.Bm + r * dk, dk);
    float db = dot(vr, dRr, dv) - kb;
    axpy(dkr, -br * er, w.Bm + r * dk, dk);
    w.dG[r] -= br * kb;
    // pair terms, vectorized over t: dG[r] gains each term and dG[t] loses it (the loss
    // collected in colsum, applied after the rows)
    float* Mpr = w.Mp + r * C;
    float* Mbr = w.Mb + r * C;
    const float* Dr = w.D + r * C;
    const float* Pr = w.P + r * C;
    const float* Kr = w.KKD + r * C;
    float gain = 0, dbl = 0;
#pragma omp simd reduction(+ : gain)
    for (int64_t t = 0; t < n; ++t) {  // P[r,t] = (qc_r . kc_t) D[r,t], zero for t > r
      const float dp = Mpr[t];         // dL/dP[r,t]
      Mpr[t] = dp * Dr[t];
      const float gp = dp * Pr[t];
      gain += gp;
      w.colsum[t] += gp;
    }
#pragma omp simd reduction(+ : gain, dbl)
    for (int64_t t = 0; t < r; ++t) {  // L[r,t] = beta_r KKD[r,t]
      const float dl = -Mbr[t];        // dL/dL[r,t]
      Mbr[t] = br * dl * Dr[t];
      dbl += dl * Kr[t];
      const float gl = dl * br * Kr[t];
      gain += gl;
      w.colsum[t] += gl;
    }
    for (int64_t t = r; t < n; ++t) Mbr[t] = 0;
    w.dG[r] += gain;
    dbeta[at.gate(b, t0 + r, h)] = db + dbl;
  }
  for (int64_t t = 0; t < n; ++t) w.dG[t] -= w.colsum[t];
  w.dG[n - 1] += dGlast;
  // dqc += Mp kc; dkc += Mp^T qc + (Mb + Mb^T) kc
  rows_times(w.dqc, dk, w.Mp, C, w.kc, dk, n, n, dk, true);
  transpose(w.T1, C, w.Mp, C, n, n);
  rows_times(w.dkc, dk, w.T1, C, w.qc, dk, n, n, dk, true);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t t = 0; t < n; ++t) w.T1[r * C + t] = w.Mb[r * C + t] + w.Mb[t * C + r];
  rows_times(w.dkc, dk, w.T1, C, w.kc, dk, n, n, dk, true);
  // G_r = sum_{t<=r} g_t: dg_t = sum_{r>=t} dG_r
  // (in double: the pair terms enter dG in +/- pairs that cancel in this sum)
  double acc = 0;
  for (int64_t r = n - 1; r >= 0; --r) dg[at.gate(b, t0 + r, h)] = float(acc += w.dG[r]);
}

// Through x -> c x / sqrt(|x|^2 + eps): dx = c (inv dy - inv^3 x (x . dy)).
inline void l2norm_backward(float* dx, const float* x, const float* dy, float inv, float c,
                            int64_t n) {
  const float xd = dot(x, dy, n);
  const float a = c * inv, bcoef = c * inv * inv * inv * xd;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dx[i] = a * dy[i] - bcoef * x[i];
}

void backward(float* dq, float* dk, float* dv, float* dg, float* dbeta, float* d_initial_state,
              const float* d_out, const float* d_final_state, const float* q, const float* k,
              const float* v, const float* g, const float* beta, const float* chunk_states,
              const GatedDeltaShape& s, float* workspace) {
  const Rows at{s};
  const int64_t C = s.chunk, kd = s.k_dim, vd = s.v_dim, grp = s.v_heads / s.k_heads;
  const int64_t tasks = s.batch * s.k_heads, NC = s.n_chunks();
  const float scale = float(1.0 / std::sqrt(double(kd)));
#pragma omp parallel for schedule(dynamic, 1) if (tasks > 1)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t b = task / s.k_heads, hk = task % s.k_heads;
    BackwardScratch w(workspace + task * gdr::backward_task_floats(s), s);
    for (int64_t m = 0; m < grp; ++m) {
      float* dS = w.dS + m * kd * vd;
      if (d_final_state)
        std::memcpy(dS, d_final_state + at.state(b, hk * grp + m), size_t(kd * vd) * sizeof(float));
      else
        std::memset(dS, 0, size_t(kd * vd) * sizeof(float));
    }
    for (int64_t c = NC - 1; c >= 0; --c) {
      const int64_t t0 = c * C, n = std::min(C, s.seq - t0);
      load_qk(w.qc, w.kc, w.rq, w.rk, q, k, at, b, hk, t0, n, scale);
      std::memset(w.dqc, 0, size_t(n * kd) * sizeof(float));
      std::memset(w.dkc, 0, size_t(n * kd) * sizeof(float));
      for (int64_t m = 0; m < grp; ++m) {
        const int64_t h = hk * grp + m;
        backward_chunk_head(w, w.dS + m * kd * vd, dv, dg, dbeta, d_out, v, g, beta,
                            chunk_states + at.chunk_state(b, h, c), at, b, h, t0, n);
      }
      for (int64_t r = 0; r < n; ++r) {
        const int64_t row = at.qk(b, t0 + r, hk);
        l2norm_backward(dq + row, q + row, w.dqc + r * kd, w.rq[r], scale, kd);
        l2norm_backward(dk + row, k + row, w.dkc + r * kd, w.rk[r], 1.0f, kd);
      }
    }
    if (d_initial_state)
      for (int64_t m = 0; m < grp; ++m)
        std::memcpy(d_initial_state + at.state(b, hk * grp + m), w.dS + m * kd * vd,
                    size_t(kd * vd) * sizeof(float));
  }
}

}  // namespace

extern const GatedDeltaRuleKernels kGatedDeltaRuleKernels{forward, backward};

}  // namespace lt::LT_ISA_NS

#include "core/isa_target_end.h"
