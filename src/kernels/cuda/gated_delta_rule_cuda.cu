#include "kernels/cuda/gated_delta_rule_cuda.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_check.cuh"

namespace lt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kL2Eps = 1e-6f;  // transformers' l2norm eps (inside the square root)

// Sizes and index maps of one (batch, head) task, and the queries' scale; passed by value
// to the kernels.
struct Task {
  explicit Task(const GatedDeltaShape& s)
      : seq(s.seq), k_heads(s.k_heads), v_heads(s.v_heads), dk(s.k_dim), dv(s.v_dim), chunk(s.chunk),
        n_chunks(s.n_chunks()), scale(static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.k_dim)))) {}
  int64_t seq, k_heads, v_heads, dk, dv, chunk, n_chunks;
  float scale;  // 1/sqrt(dk), as the CPU kernel rounds it
  __device__ int64_t qk(int64_t b, int64_t t, int64_t hk) const { return ((b * seq + t) * k_heads + hk) * dk; }
  __device__ int64_t v(int64_t b, int64_t t, int64_t h) const { return ((b * seq + t) * v_heads + h) * dv; }
  __device__ int64_t gate(int64_t b, int64_t t, int64_t h) const { return (b * seq + t) * v_heads + h; }
  __device__ int64_t state(int64_t b, int64_t h) const { return (b * v_heads + h) * dk * dv; }
  __device__ int64_t chunk_state(int64_t b, int64_t h, int64_t c) const {
    return ((b * v_heads + h) * n_chunks + c) * dk * dv;
  }
};

// One task's scratch (floats): qc, kc [C, dk]; G as hi + lo [C] each; P, KKD [C, C];
// Delta [C, dv]; the running state S [dk, dv].
__host__ __device__ inline int64_t task_floats(int64_t C, int64_t dk, int64_t dv) {
  return 2 * C * dk + 2 * C + 2 * C * C + C * dv + dk * dv;
}

__device__ inline float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.f;
  for (int64_t i = 0; i < n; ++i) acc = fmaf(a[i], b[i], acc);
  return acc;
}

// The in-chunk cumulative log decay as hi + lo floats of a double sum, as the CPU kernel
// keeps it (kernels/cpu/gated_delta_rule_simd.cpp, LogDecay: why).
__device__ inline float log_decay(const float* hi, const float* lo, int64_t r) { return hi[r] + lo[r]; }
__device__ inline float log_decay_minus(const float* hi, const float* lo, int64_t r, int64_t s) {
  return (hi[r] - hi[s]) + (lo[r] - lo[s]);
}

// The chunk's rows t0..t0+n-1 (one warp per row): qc = l2norm(q) * scale, kc = l2norm(k);
// rq, rk (nullable) get the inverse norms 1/sqrt(|x|^2 + eps).
__device__ void load_qk_rows(float* qc, float* kc, float* rq, float* rk, const float* q, const float* k,
                             const Task& at, int64_t b, int64_t hk, int64_t t0, int64_t n) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t dk = at.dk;
  for (int64_t r = warp; r < n; r += warps) {
    const float* qr = q + at.qk(b, t0 + r, hk);
    const float* kr = k + at.qk(b, t0 + r, hk);
    float sq = 0.f, sk = 0.f;
    for (int64_t i = lane; i < dk; i += 32) sq = fmaf(qr[i], qr[i], sq), sk = fmaf(kr[i], kr[i], sk);
    sq = warp_sum(sq);
    sk = warp_sum(sk);
    const float iq = 1.0f / sqrtf(sq + kL2Eps), ik = 1.0f / sqrtf(sk + kL2Eps), sqs = iq * at.scale;
    if (rq && lane == 0) rq[r] = iq, rk[r] = ik;
    for (int64_t i = lane; i < dk; i += 32) qc[r * dk + i] = qr[i] * sqs, kc[r * dk + i] = kr[i] * ik;
  }
}

// G (hi, lo), then D (nullable), P, KKD over the lower triangle. Ends synced.
__device__ void chunk_matrices(float* hi, float* lo, float* D, float* P, float* KKD, const float* qc, const float* kc,
                               const float* g, const Task& at, int64_t b, int64_t h, int64_t t0, int64_t n) {
  const int64_t C = at.chunk, dk = at.dk;
  if (threadIdx.x == 0) {  // G: a double running sum, split
    double acc = 0;
    for (int64_t r = 0; r < n; ++r) {
      acc += g[at.gate(b, t0 + r, h)];
      hi[r] = static_cast<float>(acc);
      lo[r] = static_cast<float>(acc - static_cast<double>(hi[r]));
    }
  }
  __syncthreads();
  // P[r,s] = (qc_r . kc_s) D[r,s], KKD[r,s] = (kc_r . kc_s) D[r,s], s <= r.
  for (int64_t p = threadIdx.x; p < n * n; p += blockDim.x) {
    const int64_t r = p / n, s = p % n;
    if (s > r) continue;
    const float d = expf(log_decay_minus(hi, lo, r, s));
    if (D) D[r * C + s] = d;
    P[r * C + s] = dot(qc + r * dk, kc + s * dk, dk) * d;
    KKD[r * C + s] = dot(kc + r * dk, kc + s * dk, dk) * d;
  }
  __syncthreads();
}

// Delta: (I + L) Delta = R, R_r = beta_r (v_r - e_r S0^T kc_r), L[r,s] = beta_r KKD[r,s].
// Column j of Delta needs column j of R only: one thread per column, rows in order.
__device__ void solve_delta(float* Dl, const float* KKD, const float* kc, const float* hi, const float* lo,
                            const float* S0, const float* v, const float* beta, const Task& at, int64_t b, int64_t h,
                            int64_t t0, int64_t n) {
  const int64_t C = at.chunk, dk = at.dk, dv = at.dv;
  for (int64_t j = threadIdx.x; j < dv; j += blockDim.x)
    for (int64_t r = 0; r < n; ++r) {
      float y = 0.f;
      for (int64_t i = 0; i < dk; ++i) y = fmaf(kc[r * dk + i], S0[i * dv + j], y);
      const float br = beta[at.gate(b, t0 + r, h)], er = expf(log_decay(hi, lo, r));
      float x = br * (v[at.v(b, t0 + r, h) + j] - er * y);
      for (int64_t s = 0; s < r; ++s) x = fmaf(-br * KKD[r * C + s], Dl[s * dv + j], x);
      Dl[r * dv + j] = x;
    }
}

__global__ void gated_delta_forward_kernel(float* out, float* final_state, float* chunk_states, const float* q,
                                           const float* k, const float* v, const float* g, const float* beta,
                                           const float* initial_state, Task at, float* workspace) {
  const int64_t b = blockIdx.x / at.v_heads, h = blockIdx.x % at.v_heads, hk = h / (at.v_heads / at.k_heads);
  const int64_t C = at.chunk, dk = at.dk, dv = at.dv, nt = blockDim.x, tid = threadIdx.x;
  float* w = workspace + static_cast<int64_t>(blockIdx.x) * task_floats(C, dk, dv);
  float *qc = w, *kc = qc + C * dk, *hi = kc + C * dk, *lo = hi + C, *P = lo + C, *KKD = P + C * C,
        *Dl = KKD + C * C, *S = Dl + C * dv;

  for (int64_t i = tid; i < dk * dv; i += nt) S[i] = initial_state ? initial_state[at.state(b, h) + i] : 0.f;
  __syncthreads();
  for (int64_t c = 0; c < at.n_chunks; ++c) {
    const int64_t t0 = c * C, n = C < at.seq - t0 ? C : at.seq - t0;
    if (chunk_states)
      for (int64_t i = tid; i < dk * dv; i += nt) chunk_states[at.chunk_state(b, h, c) + i] = S[i];
    load_qk_rows(qc, kc, nullptr, nullptr, q, k, at, b, hk, t0, n);
    chunk_matrices(hi, lo, nullptr, P, KKD, qc, kc, g, at, b, h, t0, n);
    solve_delta(Dl, KKD, kc, hi, lo, S, v, beta, at, b, h, t0, n);
    __syncthreads();
    // o_r = e_r S0^T qc_r + sum_{s<=r} P[r,s] Delta_s.
    for (int64_t p = tid; p < n * dv; p += nt) {
      const int64_t r = p / dv, j = p % dv;
      float y = 0.f;
      for (int64_t i = 0; i < dk; ++i) y = fmaf(qc[r * dk + i], S[i * dv + j], y);
      float o = y * expf(log_decay(hi, lo, r));
      for (int64_t s = 0; s <= r; ++s) o = fmaf(P[r * C + s], Dl[s * dv + j], o);
      out[at.v(b, t0 + r, h) + j] = o;
    }
    __syncthreads();
    // S1 = exp(G_last) S0 + sum_r w_r kc_r Delta_r^T, w_r = exp(G_last - G_r).
    const float E = expf(log_decay(hi, lo, n - 1));
    for (int64_t p = tid; p < dk * dv; p += nt) {
      const int64_t i = p / dv, j = p % dv;
      float x = S[p] * E;
      for (int64_t r = 0; r < n; ++r) x = fmaf(expf(log_decay_minus(hi, lo, n - 1, r)) * kc[r * dk + i], Dl[r * dv + j], x);
      S[p] = x;
    }
    __syncthreads();
  }
  if (final_state)
    for (int64_t i = tid; i < dk * dv; i += nt) final_state[at.state(b, h) + i] = S[i];
}

// The backward's scratch for one (batch, key head) task (floats), after the forward's
// layout: D [C, C]; dqc, dkc, A, Bm, Cm [C, dk]; rq, rk, dG, e, wl, dGrow, kcc [C]; dDl, dR
// [C, dv]; Mp, Mb, GP, GL, DB [C, C]; then the group's carried dS, grp x [dk, dv].
__host__ __device__ inline int64_t backward_task_floats(int64_t C, int64_t dk, int64_t dv, int64_t grp) {
  return task_floats(C, dk, dv) + C * C + 5 * C * dk + 7 * C + 2 * C * dv + 5 * C * C + grp * dk * dv;
}

struct BackwardScratch {
  float *qc, *kc, *hi, *lo, *P, *KKD, *Dl;  // as the forward's
  float *D, *dqc, *dkc, *A, *Bm, *Cm, *rq, *rk, *dG, *e, *wl, *dGrow, *kcc, *dDl, *dR, *Mp, *Mb, *GP, *GL, *DB, *dS;
  __device__ BackwardScratch(float* w, int64_t C, int64_t dk, int64_t dv) {
    qc = w, kc = qc + C * dk, hi = kc + C * dk, lo = hi + C, P = lo + C, KKD = P + C * C, Dl = KKD + C * C;
    w += task_floats(C, dk, dv);
    D = w, w += C * C;
    dqc = w, w += C * dk;
    dkc = w, w += C * dk;
    A = w, w += C * dk;
    Bm = w, w += C * dk;
    Cm = w, w += C * dk;
    rq = w, w += C;
    rk = w, w += C;
    dG = w, w += C;
    e = w, w += C;
    wl = w, w += C;
    dGrow = w, w += C;
    kcc = w, w += C;
    dDl = w, w += C * dv;
    dR = w, w += C * dv;
    Mp = w, w += C * C;
    Mb = w, w += C * C;
    GP = w, w += C * C;
    GL = w, w += C * C;
    DB = w, w += C * C;
    dS = w;
  }
};

// One value head's backward through one chunk (the CPU kernel's backward_chunk_head, its
// sums in the same chains, split over the block). dS holds dL/dS1 on entry and dL/dS0 on
// exit; dqc, dkc accumulate; the head's dv, dbeta and dg rows are written. Ends synced.
__device__ void backward_chunk_head(BackwardScratch& w, float* dS, float* dv_out, float* dg, float* dbeta,
                                    const float* d_out, const float* v, const float* g, const float* beta,
                                    const float* S0, const Task& at, int64_t b, int64_t h, int64_t t0, int64_t n) {
  __shared__ float red[32];
  const int64_t C = at.chunk, dk = at.dk, dv = at.dv, nt = blockDim.x, tid = threadIdx.x;
  auto dO = [&](int64_t r) { return d_out + at.v(b, t0 + r, h); };
  auto beta_at = [&](int64_t r) { return beta[at.gate(b, t0 + r, h)]; };
  chunk_matrices(w.hi, w.lo, w.D, w.P, w.KKD, w.qc, w.kc, g, at, b, h, t0, n);
  for (int64_t r = tid; r < n; r += nt) {
    w.e[r] = expf(log_decay(w.hi, w.lo, r));
    w.wl[r] = expf(log_decay_minus(w.hi, w.lo, n - 1, r));
  }
  __syncthreads();
  // Delta, recomputed from the chunk's saved start state (as the forward)
  solve_delta(w.Dl, w.KKD, w.kc, w.hi, w.lo, S0, v, beta, at, b, h, t0, n);
  // dDelta_t = w_t dS1^T kc_t + sum_{r>=t} P[r,t] dO_r
  for (int64_t p = tid; p < n * dv; p += nt) {
    const int64_t t = p / dv, j = p % dv;
    float y = 0.f;
    for (int64_t i = 0; i < dk; ++i) y = fmaf(w.kc[t * dk + i], dS[i * dv + j], y);
    float x = y * w.wl[t];
    for (int64_t r = t; r < n; ++r) x = fmaf(w.P[r * C + t], dO(r)[j], x);
    w.dDl[t * dv + j] = x;
  }
  __syncthreads();
  // (I + L)^T dR = dDelta, back substitution, one thread per column
  for (int64_t j = tid; j < dv; j += nt)
    for (int64_t t = n - 1; t >= 0; --t) {
      float x = w.dDl[t * dv + j];
      for (int64_t r = t + 1; r < n; ++r) x = fmaf(-beta_at(r) * w.KKD[r * C + t], w.dR[r * dv + j], x);
      w.dR[t * dv + j] = x;
    }
  __syncthreads();
  // A_r = S0 dO_r, Bm_r = S0 dR_r, Cm_r = dS1 Delta_r
  for (int64_t p = tid; p < n * dk; p += nt) {
    const int64_t r = p / dk, i = p % dk;
    w.A[p] = dot(S0 + i * dv, dO(r), dv);
    w.Bm[p] = dot(S0 + i * dv, w.dR + r * dv, dv);
    w.Cm[p] = dot(dS + i * dv, w.Dl + r * dv, dv);
  }
  // The pair terms: Mp[r,t] = D (dO_r . Delta_t), t <= r (from P); Mb[r,t] = -beta_r D
  // (dR_r . Delta_t), t < r (from L); GP, GL their parts of dG; DB their part of dbeta.
  for (int64_t p = tid; p < n * n; p += nt) {
    const int64_t r = p / n, t = p % n;
    if (t > r) continue;
    const float dp = dot(dO(r), w.Dl + t * dv, dv);
    w.Mp[r * C + t] = dp * w.D[r * C + t];
    w.GP[r * C + t] = dp * w.P[r * C + t];
    if (t < r) {
      const float br = beta_at(r), dl = -dot(w.dR + r * dv, w.Dl + t * dv, dv);
      w.Mb[r * C + t] = br * dl * w.D[r * C + t];
      w.DB[r * C + t] = dl * w.KKD[r * C + t];
      w.GL[r * C + t] = dl * br * w.KKD[r * C + t];
    }
  }
  // dGlast's first term, E (S0 . dS1), before dS is overwritten
  const float E = expf(log_decay(w.hi, w.lo, n - 1));
  float part = 0.f;
  for (int64_t i = tid; i < dk * dv; i += nt) part = fmaf(S0[i], dS[i], part);
  const float dG_state = E * block_sum(part, red);
  __syncthreads();
  // dS0 = E dS1 + sum_r e_r (qc_r dO_r^T - beta_r kc_r dR_r^T)
  for (int64_t p = tid; p < dk * dv; p += nt) {
    const int64_t i = p / dv, j = p % dv;
    float x = dS[p] * E;
    for (int64_t r = 0; r < n; ++r) {
      const float er = w.e[r];
      x = fmaf(er * w.qc[r * dk + i], dO(r)[j], x);
      x = fmaf(-beta_at(r) * er * w.kc[r * dk + i], w.dR[r * dv + j], x);
    }
    dS[p] = x;
  }
  // dv_r = beta_r dR_r
  for (int64_t p = tid; p < n * dv; p += nt) {
    const int64_t r = p / dv, j = p % dv;
    dv_out[at.v(b, t0 + r, h) + j] = beta_at(r) * w.dR[p];
  }
  // Per row: dbeta, and dG's terms that belong to row r
  for (int64_t r = tid; r < n; r += nt) {
    const float br = beta_at(r), er = w.e[r], wr = w.wl[r];
    const float* qr = w.qc + r * dk;
    const float* kr = w.kc + r * dk;
    const float qa = er * dot(qr, w.A + r * dk, dk);
    const float kc_c = wr * dot(kr, w.Cm + r * dk, dk);
    const float kb = er * dot(kr, w.Bm + r * dk, dk);
    float db = dot(v + at.v(b, t0 + r, h), w.dR + r * dv, dv) - kb;
    for (int64_t t = 0; t < r; ++t) db += w.DB[r * C + t];
    dbeta[at.gate(b, t0 + r, h)] = db;
    float x = qa - kc_c - br * kb;
    for (int64_t t = 0; t <= r; ++t) x += w.GP[r * C + t];
    for (int64_t t = 0; t < r; ++t) x += w.GL[r * C + t];
    w.dGrow[r] = x;
    w.kcc[r] = kc_c;
  }
  // dqc_r += e_r A_r + sum_{t<=r} Mp[r,t] kc_t
  for (int64_t p = tid; p < n * dk; p += nt) {
    const int64_t r = p / dk, i = p % dk;
    float x = fmaf(w.e[r], w.A[p], w.dqc[p]);
    for (int64_t t = 0; t <= r; ++t) x = fmaf(w.Mp[r * C + t], w.kc[t * dk + i], x);
    w.dqc[p] = x;
  }
  __syncthreads();
  // dkc_x += w_x Cm_x - beta_x e_x Bm_x + sum_{r>=x} Mp[r,x] qc_r + sum_{t<x} Mb[x,t] kc_t
  //          + sum_{r>x} Mb[r,x] kc_r
  for (int64_t p = tid; p < n * dk; p += nt) {
    const int64_t x = p / dk, i = p % dk;
    float acc = fmaf(w.wl[x], w.Cm[p], w.dkc[p]);
    acc = fmaf(-beta_at(x) * w.e[x], w.Bm[p], acc);
    for (int64_t r = x; r < n; ++r) acc = fmaf(w.Mp[r * C + x], w.qc[r * dk + i], acc);
    for (int64_t t = 0; t < x; ++t) acc = fmaf(w.Mb[x * C + t], w.kc[t * dk + i], acc);
    for (int64_t r = x + 1; r < n; ++r) acc = fmaf(w.Mb[r * C + x], w.kc[r * dk + i], acc);
    w.dkc[p] = acc;
  }
  // dG_t = dGrow_t - sum_{r>=t} GP[r,t] - sum_{r>t} GL[r,t]
  for (int64_t t = tid; t < n; t += nt) {
    float x = w.dGrow[t];
    for (int64_t r = t; r < n; ++r) x -= w.GP[r * C + t];
    for (int64_t r = t + 1; r < n; ++r) x -= w.GL[r * C + t];
    w.dG[t] = x;
  }
  __syncthreads();
  // G_r = sum_{t<=r} g_t: dg_t = sum_{r>=t} dG_r, with dG_last += E (S0 . dS1) + sum_r kcc_r
  // (in double: the pair terms enter dG in +/- pairs that cancel in this sum)
  if (tid == 0) {
    float last = dG_state;
    for (int64_t r = 0; r < n; ++r) last += w.kcc[r];
    w.dG[n - 1] += last;
    double acc = 0;
    for (int64_t r = n - 1; r >= 0; --r) dg[at.gate(b, t0 + r, h)] = static_cast<float>(acc += w.dG[r]);
  }
  __syncthreads();
}

// Through x -> c x / sqrt(|x|^2 + eps): dx = c (inv dy - inv^3 x (x . dy)). One warp per row.
__device__ void l2norm_backward_rows(float* dx, const float* x, const float* dy, const float* inv, float c,
                                     const Task& at, int64_t b, int64_t hk, int64_t t0, int64_t n) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t dk = at.dk;
  for (int64_t r = warp; r < n; r += warps) {
    const int64_t row = at.qk(b, t0 + r, hk);
    const float* dyr = dy + r * dk;
    float xd = 0.f;
    for (int64_t i = lane; i < dk; i += 32) xd = fmaf(x[row + i], dyr[i], xd);
    xd = warp_sum(xd);
    const float a = c * inv[r], bcoef = c * inv[r] * inv[r] * inv[r] * xd;
    for (int64_t i = lane; i < dk; i += 32) dx[row + i] = a * dyr[i] - bcoef * x[row + i];
  }
}

__global__ void gated_delta_backward_kernel(float* dq, float* dk, float* dv, float* dg, float* dbeta,
                                            float* d_initial_state, const float* d_out, const float* d_final_state,
                                            const float* q, const float* k, const float* v, const float* g,
                                            const float* beta, const float* chunk_states, Task at,
                                            float* workspace) {
  const int64_t grp = at.v_heads / at.k_heads;
  const int64_t b = blockIdx.x / at.k_heads, hk = blockIdx.x % at.k_heads;
  const int64_t C = at.chunk, kd = at.dk, vd = at.dv, nt = blockDim.x, tid = threadIdx.x;
  BackwardScratch w(workspace + static_cast<int64_t>(blockIdx.x) * backward_task_floats(C, kd, vd, grp), C, kd, vd);
  for (int64_t m = 0; m < grp; ++m)
    for (int64_t i = tid; i < kd * vd; i += nt)
      w.dS[m * kd * vd + i] = d_final_state ? d_final_state[at.state(b, hk * grp + m) + i] : 0.f;
  for (int64_t c = at.n_chunks - 1; c >= 0; --c) {
    const int64_t t0 = c * C, n = C < at.seq - t0 ? C : at.seq - t0;
    // qc, kc and their inverse norms (as the forward), dqc = dkc = 0
    load_qk_rows(w.qc, w.kc, w.rq, w.rk, q, k, at, b, hk, t0, n);
    for (int64_t i = tid; i < n * kd; i += nt) w.dqc[i] = 0.f, w.dkc[i] = 0.f;
    __syncthreads();
    for (int64_t m = 0; m < grp; ++m) {
      const int64_t h = hk * grp + m;
      backward_chunk_head(w, w.dS + m * kd * vd, dv, dg, dbeta, d_out, v, g, beta,
                          chunk_states + at.chunk_state(b, h, c), at, b, h, t0, n);
    }
    l2norm_backward_rows(dq, q, w.dqc, w.rq, at.scale, at, b, hk, t0, n);
    l2norm_backward_rows(dk, k, w.dkc, w.rk, 1.0f, at, b, hk, t0, n);
    __syncthreads();
  }
  if (d_initial_state)
    for (int64_t m = 0; m < grp; ++m)
      for (int64_t i = tid; i < kd * vd; i += nt) d_initial_state[at.state(b, hk * grp + m) + i] = w.dS[m * kd * vd + i];
}

// The CPU kernel's check_gated_delta_shape lives in the CPU engine, which this library
// does not link (lt_cuda_tests runs where that engine's libraries are absent).
void check_shape(const GatedDeltaShape& s) {
  auto bad = [](const std::string& what) {
    throw std::invalid_argument("gated delta rule (CUDA): " + what);
  };
  if (s.batch <= 0 || s.seq <= 0 || s.k_heads <= 0 || s.v_heads <= 0 || s.k_dim <= 0 || s.v_dim <= 0 || s.chunk <= 0)
    bad("every size must be positive (batch, seq, k_heads, v_heads, k_dim, v_dim, chunk)");
  if (s.v_heads % s.k_heads != 0)
    bad("v_heads (" + std::to_string(s.v_heads) + ") is not a multiple of k_heads (" + std::to_string(s.k_heads) +
        "); fix the config");
  if (s.batch * s.v_heads > 0x7fffffff) bad("batch * v_heads exceeds the grid");
}

}  // namespace

size_t gated_delta_rule_forward_workspace_bytes(const GatedDeltaShape& s) {
  check_shape(s);
  return static_cast<size_t>(s.batch * s.v_heads * task_floats(s.chunk, s.k_dim, s.v_dim)) * sizeof(float);
}

size_t gated_delta_rule_backward_workspace_bytes(const GatedDeltaShape& s) {
  check_shape(s);
  return static_cast<size_t>(s.batch * s.k_heads *
                             backward_task_floats(s.chunk, s.k_dim, s.v_dim, s.v_heads / s.k_heads)) *
         sizeof(float);
}

void gated_delta_rule_forward(float* out, float* final_state, float* chunk_states, const float* q, const float* k,
                              const float* v, const float* g, const float* beta, const float* initial_state,
                              const GatedDeltaShape& s, void* workspace, void* stream) {
  check_shape(s);
  const Task at(s);
  gated_delta_forward_kernel<<<static_cast<unsigned>(s.batch * s.v_heads), kThreads, 0, as_stream(stream)>>>(
      out, final_state, chunk_states, q, k, v, g, beta, initial_state, at, static_cast<float*>(workspace));
  LT_CUDA_CHECK_LAUNCH(gated_delta_forward_kernel);
}

void gated_delta_rule_backward(float* dq, float* dk, float* dv, float* dg, float* dbeta, float* d_initial_state,
                               const float* d_out, const float* d_final_state, const float* q, const float* k,
                               const float* v, const float* g, const float* beta, const float* chunk_states,
                               const GatedDeltaShape& s, void* workspace, void* stream) {
  check_shape(s);
  if (!chunk_states)
    throw std::invalid_argument(
        "gated delta rule backward (CUDA): no chunk states given; pass the chunk_states buffer that the "
        "forward with the same inputs filled");
  const Task at(s);
  gated_delta_backward_kernel<<<static_cast<unsigned>(s.batch * s.k_heads), kThreads, 0, as_stream(stream)>>>(
      dq, dk, dv, dg, dbeta, d_initial_state, d_out, d_final_state, q, k, v, g, beta, chunk_states, at,
      static_cast<float*>(workspace));
  LT_CUDA_CHECK_LAUNCH(gated_delta_backward_kernel);
}

}  // namespace lt::cuda
