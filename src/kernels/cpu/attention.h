// Causal grouped-query attention (flash-attention style on CPU).
//   q: [B*S, Hq, D]; k, v: [B*S, Hkv, D] (token-major, as the projections write them)
//   o: [B*S, Hq, D]; lse: [B, Hq, S] = logsumexp over keys of the scaled scores
//   query head h reads kv head h / (Hq / Hkv); scores = scale * q·k, key j <= query i.
//   doc_start (optional): [B*S], the row-relative index where token i's document starts;
//   query i then sees keys doc_start[i] <= j <= i only (block-diagonal causal attention
//   over documents packed into one row). Each row must be a run of documents: doc_start
//   of a row's token 0 is 0, and each next token either continues its predecessor's
//   document (the same doc_start) or starts one (doc_start[i] == i). nullptr: one causal
//   sequence per row, bit for bit what the kernels computed before documents existed.
//   window (optional, > 0): sliding-window attention as transformers masks it, query i
//   sees the `window` keys i - window + 1 <= j <= i (with documents, the later of the two
//   starts). 0, or a window >= S, is full causal attention, bit for bit.
//   Key tiles no query of a tile can see are skipped, and so are the query rows of a
//   tile that see none of a key tile, so short documents and narrow windows cost less
//   than causal rows.
// Forward tiles over keys with an online softmax: memory O(S) per head, never S x S.
// Backward recomputes the probabilities from q, k and the saved lse; dq, dk, dv overwrite.
//
// One tiling and threading driver (attention_driver.h: tiles, work items, summation
// order) runs over micro-kernels written per ISA level (attention_tiles.h states
// their contract): attention_scalar.cpp (plain loops), attention_avx2.cpp (8-lane ymm),
// attention_avx512.cpp (16-lane zmm). The public functions pick the level in force
// (core/isa_dispatch.h). Within one level, results are bitwise identical for any thread
// count; levels differ in rounding (vector width, FMA), so compare them only with bounds.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/isa_dispatch.h"

namespace lt {

void attention_forward(float* o, float* lse, const float* q, const float* k, const float* v,
                       int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                       const int32_t* doc_start = nullptr, int64_t window = 0);
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const float* o, const float* lse, int64_t B,
                        int64_t S, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                        const int32_t* doc_start = nullptr, int64_t window = 0);

// True when doc_start ([B*S]) describes runs of documents as attention_forward requires.
bool valid_doc_starts(const int32_t* doc_start, int64_t B, int64_t S);

// One table per ISA level, each defined in attention_<level>.cpp.
struct AttentionKernels {
  void (*forward)(float* o, float* lse, const float* q, const float* k, const float* v, int64_t B,
                  int64_t S, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                  const int32_t* doc_start, int64_t window);
  void (*backward)(float* dq, float* dk, float* dv, const float* dout, const float* q,
                   const float* k, const float* v, const float* o, const float* lse, int64_t B,
                   int64_t S, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                   const int32_t* doc_start, int64_t window);
};
LT_ISA_TABLE(AttentionKernels, kAttentionKernels)

namespace ref {
// Plain reference: materializes one row of probabilities at a time. doc_start and window
// as above (nullptr and 0: keys 0..i).
inline int64_t first_key(const int32_t* doc_start, int64_t window, int64_t b, int64_t S, int64_t i) {
  int64_t j0 = doc_start ? doc_start[b * S + i] : 0;
  if (window > 0) j0 = std::max(j0, i - window + 1);
  return j0;
}
template <typename T>
void attention_forward(T* o, T* lse, const T* q, const T* k, const T* v, int64_t B, int64_t S,
                       int64_t Hq, int64_t Hkv, int64_t D, T scale,
                       const int32_t* doc_start = nullptr, int64_t window = 0) {
  const int64_t group = Hq / Hkv;
  std::vector<T> p(S);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < S; ++i) {
        const int64_t j0 = first_key(doc_start, window, b, S, i);
        const T* qi = q + ((b * S + i) * Hq + h) * D;
        T mx = -INFINITY;
        for (int64_t j = j0; j <= i; ++j) {
          const T* kj = k + ((b * S + j) * Hkv + hk) * D;
          T s = 0;
          for (int64_t d = 0; d < D; ++d) s += qi[d] * kj[d];
          p[j] = s * scale;
          mx = std::max(mx, p[j]);
        }
        T sum = 0;
        for (int64_t j = j0; j <= i; ++j) sum += std::exp(p[j] - mx);
        const T l = mx + std::log(sum);
        lse[(b * Hq + h) * S + i] = l;
        T* oi = o + ((b * S + i) * Hq + h) * D;
        for (int64_t d = 0; d < D; ++d) oi[d] = 0;
        for (int64_t j = j0; j <= i; ++j) {
          const T pj = std::exp(p[j] - l);
          const T* vj = v + ((b * S + j) * Hkv + hk) * D;
          for (int64_t d = 0; d < D; ++d) oi[d] += pj * vj[d];
        }
      }
    }
}
template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                        const T* o, const T* lse, int64_t B, int64_t S, int64_t Hq, int64_t Hkv,
                        int64_t D, T scale, const int32_t* doc_start = nullptr,
                        int64_t window = 0) {
  const int64_t group = Hq / Hkv;
  for (int64_t i = 0; i < B * S * Hq * D; ++i) dq[i] = 0;
  for (int64_t i = 0; i < B * S * Hkv * D; ++i) dk[i] = dv[i] = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < S; ++i) {
        const int64_t qoff = ((b * S + i) * Hq + h) * D;
        T delta = 0;  // sum_d dO * O
        for (int64_t d = 0; d < D; ++d) delta += dout[qoff + d] * o[qoff + d];
        const T l = lse[(b * Hq + h) * S + i];
        for (int64_t j = first_key(doc_start, window, b, S, i); j <= i; ++j) {
          const int64_t koff = ((b * S + j) * Hkv + hk) * D;
          T s = 0, dp = 0;
          for (int64_t d = 0; d < D; ++d) {
            s += q[qoff + d] * k[koff + d];
            dp += dout[qoff + d] * v[koff + d];
          }
          const T p = std::exp(s * scale - l);
          const T ds = p * (dp - delta) * scale;
          for (int64_t d = 0; d < D; ++d) {
            dv[koff + d] += p * dout[qoff + d];
            dq[qoff + d] += ds * k[koff + d];
            dk[koff + d] += ds * q[qoff + d];
          }
        }
      }
    }
}
}  // namespace ref

}  // namespace lt
