// AVX2 + FMA kernels of the fused step (see adamw_kernels.h): the avx2 level's table,
// bitwise the scalar kernel's result. 8 lanes per vector; the tail of the last block (n
// not a multiple of 8) goes through small stack copies, since AVX2 has no byte masks.
//
// Where AVX2 differs from the AVX-512 kernel (adamw_kernels_avx512.cpp):
//  - Dequantization rebuilds map.value[code] by arithmetic from the code's decade and bin,
//    plus a one-ulp correction read from a 256-bit mask (quant_map.h, QuantArithDequant).
//    A gather per 8 codes took about a quarter of the step on Zen 4 (measured: ~13 cycles
//    per 8-lane gather; in-cache step 521 M params/s with gathers, 571 with this). AVX2
//    permutes hold 8 fp32 entries, so a register table would take 32 permutes and 31
//    blends per vector; byte-plane lookups by vpshufb (16 entries) take 16 shuffles and
//    15 blends per plane and 32 codes, 4 planes.
//  - Nearest-code quantization is the arithmetic fast path of quant_map.h with the segment
//    found by counting compares against the 8 boundaries (QuantFastPath::bound) instead of
//    a 27-binade table lookup, and the last segment (code 255) by its compare alone, so the
//    per-segment tables fit one 8-entry permute. Lanes near a midpoint take the exact table
//    per lane (rare), as in the AVX-512 kernel.
// GCC 12 warns about the undefined pass-through operand inside its own intrinsic headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "optim/adamw_kernels.h"
#include "optim/quant_map.h"

#define LT_ISA_TARGET 1
#include "core/isa_target.h"

namespace lt::LT_ISA_NS {

namespace {

// Lanes [0, rem) of a vector: all lanes when rem >= 8.
inline __m256i lane_mask(int rem) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

inline __m256 load_f32(const float* p, int rem) {
  return rem >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lane_mask(rem));
}
inline void store_f32(float* p, __m256 x, int rem) {
  if (rem >= 8) _mm256_storeu_ps(p, x);
  else _mm256_maskstore_ps(p, lane_mask(rem), x);
}

// 8 codes, zero-extended to 32 bits (lanes past rem read as code 0).
inline __m256i load_codes(const uint8_t* p, int rem) {
  if (rem >= 8) return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  uint64_t w = 0;
  std::memcpy(&w, p, static_cast<size_t>(rem));
  return _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(w)));
}
// 8 codes in 0..255 (32-bit lanes) to bytes.
inline void store_codes(uint8_t* p, __m256i code, int rem) {
  const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1));
  const __m128i b = _mm_packus_epi16(w, w);
  if (rem >= 8) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), b);
    return;
  }
  const uint64_t w8 = static_cast<uint64_t>(_mm_cvtsi128_si64(b));
  std::memcpy(p, &w8, static_cast<size_t>(rem));
}
// 32 codes (four vectors of 8, in order) to 32 bytes: the packs work inside 128-bit
// halves, so each half holds 4 codes of every vector; one dword permute restores the order.
inline void store_codes32(uint8_t* p, __m256i c0, __m256i c1, __m256i c2, __m256i c3) {
  const __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_packus_epi32(c2, c3));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

inline __m256 load_grad(const AdamWTensorArgs& a, int64_t i, int rem) {
  if (a.grad_f32) return load_f32(a.grad_f32 + i, rem);
  __m128i h;
  if (rem >= 8) {
    h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.grad_bf16 + i));
  } else {
    alignas(16) uint16_t t[8] = {};
    std::memcpy(t, a.grad_bf16 + i, sizeof(uint16_t) * static_cast<size_t>(rem));
    h = _mm_load_si128(reinterpret_cast<const __m128i*>(t));
  }
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// bf16 round to nearest even, NaN kept a (quiet) NaN: lt::f32_to_bf16's integer recipe,
// giving 8 bf16 values in 32-bit lanes (upper halves zero).
inline __m256i bf16_bits(__m256 p) {
  const __m256i u = _mm256_castps_si256(p);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x400000));
  const __m256 nan = _mm256_cmp_ps(p, p, _CMP_UNORD_Q);
  return _mm256_srli_epi32(_mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(quiet), nan)), 16);
}
inline void store_bf16(bf16* out, __m256 p, int rem) {
  const __m256i h = bf16_bits(p);
  const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  if (rem >= 8) _mm_storeu_si128(reinterpret_cast<__m128i*>(out), w);
  else {
    alignas(16) uint16_t t[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(t), w);
    std::memcpy(out, t, sizeof(uint16_t) * static_cast<size_t>(rem));
  }
}
// 16 values (two vectors, in order) to bf16.
inline void store_bf16x16(bf16* out, __m256 p0, __m256 p1) {
  const __m256i w = _mm256_packus_epi32(bf16_bits(p0), bf16_bits(p1));  // halves interleaved
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permute4x64_epi64(w, 0xd8));
}

// The fast path's registers for one map (quant_map.h, QuantFastPath).
struct FastRegs {
  __m256i bound[8];  // the boundaries' bits: for a >= 0, a > b <=> bits(a) > bits(b) as int32
  __m256 a, b;       // the line of segments 0..7
  __m256i h;         // the top code of segments 0..7
  const QuantMap* map;
};

inline FastRegs load_fast(const QuantMap& q) {
  const QuantFastPath& f = q.fast;
  FastRegs r;
  for (int k = 0; k < 8; ++k) {
    int32_t bits;
    std::memcpy(&bits, &f.bound[k], 4);
    r.bound[k] = _mm256_set1_epi32(bits);
  }
  r.a = _mm256_loadu_ps(f.A);
  r.b = _mm256_loadu_ps(f.B);
  r.h = _mm256_cvttps_epi32(_mm256_loadu_ps(f.H));
  r.map = &q;
  return r;
}

// Nearest codes of 8 values: the exact code of quantize_nearest() for every non-NaN x.
template <bool kSigned>
inline __m256i nearest_code(const FastRegs& r, __m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i ab = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  // Segment 0..7 by the first 7 boundaries (each compare adds -1 or 0); a above the last
  // one is segment 8, the constant code 255, set at the end.
  __m256i seg = _mm256_setzero_si256();
  for (int k = 0; k < 7; ++k) seg = _mm256_sub_epi32(seg, _mm256_cmpgt_epi32(ab, r.bound[k]));
  const __m256i top = _mm256_cmpgt_epi32(ab, r.bound[7]);
  const __m256 u = _mm256_fmadd_ps(_mm256_castsi256_ps(ab), _mm256_permutevar8x32_ps(r.a, seg),
                                   _mm256_permutevar8x32_ps(r.b, seg));
  // floor(u) and the ambiguity test in integer form, as in the AVX-512 kernel: w = u + 4096
  // lies in [4096, 8192) where floats step by 2^-11; (bits >> 11) & 0xff is floor(u) unless
  // u lies within 2^-12 (kFastAmbiguity) of an integer, which the low 11 bits being 0
  // flag (NaN too). Segment 8 lanes are not ambiguous: their code is 255 whatever u is.
  const __m256i w = _mm256_castps_si256(_mm256_add_ps(u, _mm256_set1_ps(4096.f)));
  __m256i amb = _mm256_cmpeq_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x7ff)), _mm256_setzero_si256());
  amb = _mm256_andnot_si256(top, amb);
  // A negative x crosses a boundary when |x| >= the mirrored midpoint, which is the
  // boundary itself or the float above it (midpoints round down on both sides), so
  // |x| > bound is right for every |x| but the boundary. Inside segments 1..8 the boundary
  // below lies at an integer of u (flagged above); segment 0 is constant, so flag its upper
  // boundary here.
  if constexpr (kSigned) amb = _mm256_or_si256(amb, _mm256_cmpeq_epi32(ab, r.bound[0]));
  __m256i code = _mm256_and_si256(_mm256_srli_epi32(w, 11), _mm256_set1_epi32(0xff));
  // Only the top of a segment needs its clamp: a decade's line extended past its upper
  // edge reaches H + 1 before the boundary, while the lower boundary lies at u >= L + 0.13
  // in every segment (u = L + 0.2 between decades), so floor(u) >= L there.
  code = _mm256_min_epi32(code, _mm256_permutevar8x32_epi32(r.h, seg));
  code = _mm256_blendv_epi8(code, _mm256_set1_epi32(255), top);
  // Negative x (blend by the sign bit of x): the signed map's mirror, max(254 - code, 0);
  // the unsigned map's bucket 0, code 0.
  const __m256 neg_code = kSigned ? _mm256_castsi256_ps(_mm256_max_epi32(
                                        _mm256_sub_epi32(_mm256_set1_epi32(254), code), _mm256_setzero_si256()))
                                  : _mm256_setzero_ps();
  code = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(code), neg_code, x));
  if (int lanes = _mm256_movemask_ps(_mm256_castsi256_ps(amb))) [[unlikely]] {
    alignas(32) float xs[8];
    alignas(32) int32_t cs[8];
    _mm256_store_ps(xs, x);
    _mm256_store_si256(reinterpret_cast<__m256i*>(cs), code);
    for (; lanes; lanes &= lanes - 1) {
      const int l = __builtin_ctz(static_cast<unsigned>(lanes));
      cs[l] = quantize_nearest(*r.map, xs[l]);
    }
    code = _mm256_load_si256(reinterpret_cast<const __m256i*>(cs));
  }
  return code;
}

// map.value[code] for 8 codes by arithmetic (quant_map.h, QuantArithDequant): ~18
// register operations, where a gather costs about as much as 50 of them here.
struct DequantRegs {
  __m256 a, b;
  __m256i plus;
};

inline DequantRegs load_dequant(const QuantMap& q) {
  return {_mm256_loadu_ps(q.arith.a), _mm256_loadu_ps(q.arith.b),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.arith.plus))};
}

template <bool kSigned>
inline __m256 lookup(const DequantRegs& r, __m256i code) {
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i d = _mm256_sub_epi32(code, _mm256_set1_epi32(127));  // signed: its sign is the value's
  const __m256i j = kSigned ? _mm256_abs_epi32(d) : _mm256_add_epi32(code, one);
  const __m256 ft = _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_add_epi32(j, j), one));  // t = 2j + 1
  const __m256 rr = _mm256_sub_ps(ft, _mm256_and_ps(ft, _mm256_castsi256_ps(_mm256_set1_epi32(0xff800000u))));
  const __m256i slot = _mm256_srli_epi32(_mm256_castps_si256(ft), 23);  // the permutes read bits 0..2
  const __m256 x = _mm256_fmadd_ps(rr, _mm256_permutevar8x32_ps(r.a, slot), _mm256_permutevar8x32_ps(r.b, slot));
  // +1 ulp where bit (code & 31) of word (code >> 5) is set: shifted to bit 31, then
  // spread to all bits (-1), and subtracted.
  const __m256i word = _mm256_permutevar8x32_epi32(r.plus, _mm256_srli_epi32(code, 5));
  const __m256i up = _mm256_srai_epi32(_mm256_sllv_epi32(word, _mm256_andnot_si256(code, _mm256_set1_epi32(31))), 31);
  __m256i v = _mm256_sub_epi32(_mm256_castps_si256(x), up);
  if constexpr (kSigned)
    v = _mm256_or_si256(v, _mm256_and_si256(d, _mm256_set1_epi32(static_cast<int>(0x80000000u))));
  else
    v = _mm256_blendv_epi8(v, _mm256_set1_epi32(0x3f800000), _mm256_cmpeq_epi32(code, _mm256_set1_epi32(255)));
  return _mm256_castsi256_ps(v);
}

struct Consts {
  __m256 b1, omb1, b2, omb2, eps, decay, neg_step, isbc2, clip;
};

inline Consts broadcast(const AdamWStepConsts& c) {
  return {_mm256_set1_ps(c.beta1), _mm256_set1_ps(c.one_minus_beta1), _mm256_set1_ps(c.beta2),
          _mm256_set1_ps(c.one_minus_beta2), _mm256_set1_ps(c.eps), _mm256_set1_ps(c.decay),
          _mm256_set1_ps(-c.step_size), _mm256_set1_ps(c.inv_sqrt_bc2), _mm256_set1_ps(c.clip)};
}

// m, v from g and the old states (adamw_math.h); returns the lanes whose v is NaN or +Inf.
inline __m256 moments(const Consts& c, __m256 g, __m256 m_old, __m256 v_old, __m256* m, __m256* v) {
  g = _mm256_mul_ps(g, c.clip);
  *m = _mm256_fmadd_ps(c.b1, m_old, _mm256_mul_ps(c.omb1, g));
  *v = _mm256_fmadd_ps(c.b2, v_old, _mm256_mul_ps(_mm256_mul_ps(c.omb2, g), g));
  return _mm256_cmp_ps(*v, _mm256_set1_ps(INFINITY), _CMP_NLT_UQ);
}

inline __m256 new_param(const Consts& c, __m256 p, __m256 m, __m256 v) {
  const __m256 denom = _mm256_fmadd_ps(_mm256_sqrt_ps(v), c.isbc2, c.eps);
  return _mm256_fmadd_ps(c.neg_step, _mm256_div_ps(m, denom), _mm256_mul_ps(p, c.decay));
}

// The largest lane (max is exact, so the order of the reduction does not matter).
inline float reduce_max(__m256 x) {
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

int rem_of(int64_t len, int64_t j) { return static_cast<int>(std::min<int64_t>(8, len - j)); }

int64_t adamw8_blocks(const AdamWTensorArgs& a, const AdamW8State& s, const AdamWStepConsts& sc,
                      int64_t first_block, int64_t last_block) {
  const QuantMap& qm = signed_dynamic_map();
  const QuantMap& qv = unsigned_dynamic_map();
  const FastRegs fm = load_fast(qm), fv = load_fast(qv);
  const DequantRegs dm = load_dequant(qm), dv = load_dequant(qv);
  const Consts c = broadcast(sc);
  alignas(32) float m[kMaxAdamWBlock], v[kMaxAdamWBlock];
  int64_t skipped = 0;
  for (int64_t b = first_block; b < last_block; ++b) {
    const int64_t i0 = b * a.block, len = std::min(a.block, a.n - i0);
    const __m256 am_old = _mm256_set1_ps(s.m_absmax[b]), av_old = _mm256_set1_ps(s.v_absmax[b]);
    __m256 am = _mm256_setzero_ps(), av = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int64_t j = 0; j < len; j += 8) {
      const int rem = rem_of(len, j);
      const int64_t i = i0 + j;
      const __m256 m_old = _mm256_mul_ps(lookup<true>(dm, load_codes(s.m_code + i, rem)), am_old);
      const __m256 v_old = _mm256_mul_ps(lookup<false>(dv, load_codes(s.v_code + i, rem)), av_old);
      __m256 mj, vj;
      __m256 lane_bad = moments(c, load_grad(a, i, rem), m_old, v_old, &mj, &vj);
      __m256 abs_m = _mm256_andnot_ps(_mm256_set1_ps(-0.f), mj), vk = vj;
      if (rem < 8) {  // lanes past the block hold code 0's (finite) value: keep them out
        const __m256 k = _mm256_castsi256_ps(lane_mask(rem));
        lane_bad = _mm256_and_ps(lane_bad, k);
        abs_m = _mm256_and_ps(abs_m, k);
        vk = _mm256_and_ps(vk, k);
      }
      bad = _mm256_or_ps(bad, lane_bad);
      am = _mm256_max_ps(am, abs_m);
      av = _mm256_max_ps(av, vk);
      _mm256_store_ps(m + j, mj);
      _mm256_store_ps(v + j, vj);
    }
    if (_mm256_movemask_ps(bad)) {
      ++skipped;
      continue;
    }
    const float amax_m = reduce_max(am), amax_v = reduce_max(av);
    const __m256 im = _mm256_set1_ps(amax_m > 0 ? 1.0f / amax_m : 0.f);
    const __m256 iv = _mm256_set1_ps(amax_v > 0 ? 1.0f / amax_v : 0.f);
    // Parameter update and requantization 32 elements at a time (then single vectors for
    // the rest of the block, the last one partial).
    int64_t j = 0;
    for (; j + 32 <= len; j += 32) {
      __m256i cm[4], cv[4];
      __m256 p[4];
      for (int q = 0; q < 4; ++q) {
        const int64_t jj = j + 8 * q, i = i0 + jj;
        const __m256 mj = _mm256_load_ps(m + jj), vj = _mm256_load_ps(v + jj);
        p[q] = new_param(c, _mm256_loadu_ps(a.param + i), mj, vj);
        _mm256_storeu_ps(a.param + i, p[q]);
        cm[q] = nearest_code<true>(fm, _mm256_mul_ps(mj, im));
        cv[q] = nearest_code<false>(fv, _mm256_mul_ps(vj, iv));
      }
      if (a.out_bf16) {
        store_bf16x16(a.out_bf16 + i0 + j, p[0], p[1]);
        store_bf16x16(a.out_bf16 + i0 + j + 16, p[2], p[3]);
      }
      store_codes32(s.m_code + i0 + j, cm[0], cm[1], cm[2], cm[3]);
      store_codes32(s.v_code + i0 + j, cv[0], cv[1], cv[2], cv[3]);
    }
    for (; j < len; j += 8) {
      const int rem = rem_of(len, j);
      const int64_t i = i0 + j;
      const __m256 mj = _mm256_load_ps(m + j), vj = _mm256_load_ps(v + j);
      const __m256 p = new_param(c, load_f32(a.param + i, rem), mj, vj);
      store_f32(a.param + i, p, rem);
      if (a.out_bf16) store_bf16(a.out_bf16 + i, p, rem);
      store_codes(s.m_code + i, nearest_code<true>(fm, _mm256_mul_ps(mj, im)), rem);
      store_codes(s.v_code + i, nearest_code<false>(fv, _mm256_mul_ps(vj, iv)), rem);
    }
    s.m_absmax[b] = amax_m;
    s.v_absmax[b] = amax_v;
  }
  return skipped;
}

int64_t adamw32_blocks(const AdamWTensorArgs& a, const AdamW32State& s, const AdamWStepConsts& sc,
                       int64_t first_block, int64_t last_block) {
  const Consts c = broadcast(sc);
  alignas(32) float m[kMaxAdamWBlock], v[kMaxAdamWBlock];
  int64_t skipped = 0;
  for (int64_t b = first_block; b < last_block; ++b) {
    const int64_t i0 = b * a.block, len = std::min(a.block, a.n - i0);
    __m256 bad = _mm256_setzero_ps();
    for (int64_t j = 0; j < len; j += 8) {
      const int rem = rem_of(len, j);
      const int64_t i = i0 + j;
      __m256 mj, vj;
      __m256 lane_bad = moments(c, load_grad(a, i, rem), load_f32(s.m + i, rem), load_f32(s.v + i, rem), &mj, &vj);
      if (rem < 8) lane_bad = _mm256_and_ps(lane_bad, _mm256_castsi256_ps(lane_mask(rem)));
      bad = _mm256_or_ps(bad, lane_bad);
      _mm256_store_ps(m + j, mj);
      _mm256_store_ps(v + j, vj);
    }
    if (_mm256_movemask_ps(bad)) {
      ++skipped;
      continue;
    }
    for (int64_t j = 0; j < len; j += 8) {
      const int rem = rem_of(len, j);
      const int64_t i = i0 + j;
      const __m256 mj = _mm256_load_ps(m + j), vj = _mm256_load_ps(v + j);
      const __m256 p = new_param(c, load_f32(a.param + i, rem), mj, vj);
      store_f32(a.param + i, p, rem);
      store_f32(s.m + i, mj, rem);
      store_f32(s.v + i, vj, rem);
      if (a.out_bf16) store_bf16(a.out_bf16 + i, p, rem);
    }
  }
  return skipped;
}

void quantize(const QuantMap& map, const float* x, uint8_t* code, int64_t n) {
  const FastRegs r = load_fast(map);
  for (int64_t i = 0; i < n; i += 8) {
    const int rem = rem_of(n, i);
    const __m256 xi = load_f32(x + i, rem);
    store_codes(code + i, map.is_signed ? nearest_code<true>(r, xi) : nearest_code<false>(r, xi), rem);
  }
}

void dequantize(const QuantMap& map, const uint8_t* code, float absmax, int64_t n, float* out) {
  const DequantRegs r = load_dequant(map);
  const __m256 sc = _mm256_set1_ps(absmax);
  for (int64_t i = 0; i < n; i += 8) {
    const int rem = rem_of(n, i);
    const __m256i c = load_codes(code + i, rem);
    store_f32(out + i, _mm256_mul_ps(map.is_signed ? lookup<true>(r, c) : lookup<false>(r, c), sc), rem);
  }
}

}  // namespace

extern const AdamWKernels kAdamWKernels{"avx2", adamw8_blocks, adamw32_blocks, quantize, dequantize};

}  // namespace lt::LT_ISA_NS

#include "core/isa_target_end.h"
