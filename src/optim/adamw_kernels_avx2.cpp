// AVX2 + FMA kernels of the fused step (see adamw_kernels.h): the avx2 level's table,
// bitwise the scalar kernel's result. 8 lanes per vector; the tail of the last block (n
// not a multiple of 8) goes through small stack copies, since AVX2 has no byte masks.
//
// Where AVX2 differs from the AVX-512 kernel (adamw_kernels_avx512.cpp):
//  - Dequantization rebuilds map.value[code] by arithmetic from the code's decade and bin,
//    plus a one-ulp correction read from a 256-bit mask (DequantTables, built here). A
//    gather per 8 codes took about a quarter of the step on Zen 4 (measured: ~13 cycles
//    per 8-lane gather; in-cache step 521 M params/s with gathers, 571 with an earlier
//    form of this arithmetic). AVX2 permutes hold 8 fp32
//    entries, so a register table would take 32 permutes and 31 blends per vector;
//    byte-plane lookups by vpshufb (16 entries) take 16 shuffles and 15 blends per plane
//    and 32 codes, 4 planes.
//  - Nearest-code quantization is the arithmetic fast path of quant_map.h with the segment
//    found by a log10 estimate from the float's bits and one compare against the 8
//    boundaries (QuantFastPath::bound) instead of a 27-binade table lookup, the 9 segments
//    sharing the 8 entries of one permute (FastRegs). Lanes near a midpoint take the exact
//    table per lane (rare), as in the AVX-512 kernel, tested for an m and a v vector at once.
// About 95 vector operations per 8 parameters (was ~140): 720 M params/s single-thread in
// cache on Zen 4 (was 565, same harness and run).
// GCC 12 warns about the undefined pass-through operand inside its own intrinsic headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "optim/adamw_kernels.h"
#include "optim/quant_map.h"

#define LT_ISA_TARGET 1
#include "core/isa_target.h"

namespace lt::LT_ISA_NS {

namespace {

inline float f32_of_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t bits_of_f32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

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
// 8 codes in -1..255 (32-bit lanes) to bytes, -1 as 0 (unsigned saturation).
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
// 32 codes (four vectors of 8, in order; -1 saturates to 0) to 32 bytes: the packs work inside 128-bit
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

// The fast path's registers for one map: the segment estimate's tables (quant_map.h,
// QuantFastPath), 8 entries.
struct FastRegs {
  __m256i bound;     // segment q's upper boundary (bits), by q
  __m256 a, b;       // the line of segments 0..7
  __m256i h;         // the top code of segments 0..7
  const QuantMap* map;
};

inline FastRegs load_fast(const QuantMap& q) {
  const QuantFastPath& f = q.fast;
  FastRegs r;
  r.bound = _mm256_castps_si256(_mm256_loadu_ps(f.bound));
  r.a = _mm256_loadu_ps(f.a);
  r.b = _mm256_loadu_ps(f.b);
  r.h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(f.h));
  r.map = &q;
  return r;
}

// Nearest codes of 8 values by the fast path; *low gets the lanes' ambiguity words, 0 where
// the code may be wrong (fix_codes then gives the exact code of quantize_nearest() for
// every non-NaN x). Callers test the words of two vectors at once. Code 0 of a negative x
// may come out as -1, which the unsigned-saturating packs of store_codes* turn into 0.
// kBounded: |x| < 5 (the step's x = m * (1 / absmax), |x| <= 1 + 2^-23), so the segment
// estimate needs no upper clamp.
template <bool kSigned, bool kBounded>
inline __m256i nearest_code_fast(const FastRegs& r, __m256 x, __m256i* low) {
  const __m256i bits = _mm256_castps_si256(x);
  // a = max(|x|, kSegMinA) (signed map) or max(x, kSegMinA) (unsigned: x <= -0 too, as
  // integers): every a below kSegMinA lies in segment 0 with the zero code, as kSegMinA
  // does, and the segment estimate needs no lower clamp.
  const __m256i amin = _mm256_set1_epi32(kSegMinABits);
  const __m256i ab = kSigned ? _mm256_max_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)), amin)
                             : _mm256_max_epi32(bits, amin);
  // The segment estimate (quant_map.h, kSegK): y = 2^23 + q.
  __m256 y = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ab), _mm256_set1_ps(kSegK), _mm256_set1_ps(kSegC));
  if constexpr (!kBounded) y = _mm256_min_ps(y, _mm256_set1_ps(kSegTop));
  const __m256i q = _mm256_castps_si256(y);
  const __m256i seg = _mm256_sub_epi32(q, _mm256_cmpgt_epi32(ab, _mm256_permutevar8x32_epi32(r.bound, q)));
  const __m256 u = _mm256_fmadd_ps(_mm256_castsi256_ps(ab), _mm256_permutevar8x32_ps(r.a, seg),
                                   _mm256_permutevar8x32_ps(r.b, seg));
  // floor(u) and the ambiguity test in integer form, as in the AVX-512 kernel: w = u + 4096
  // lies in [4096, 8192) where floats step by 2^-11; (bits >> 11) - (bits(4096) >> 11) is
  // floor(u) unless u lies within 2^-12 (kFastAmbiguity) of an integer, which the low 11
  // bits being 0 flag (inf too). Larger u (a > 1) only grows the code, clamped to 255.
  const __m256i w = _mm256_castps_si256(_mm256_add_ps(u, _mm256_set1_ps(4096.f)));
  *low = _mm256_and_si256(w, _mm256_set1_epi32(0x7ff));
  // A negative x crosses a boundary when |x| >= the mirrored midpoint, which is the
  // boundary itself or the float above it (midpoints round down on both sides), so
  // |x| > bound is right for every |x| but the boundary, which lies at an integer of u
  // (flagged above).
  // Bounded, u < 2^31 (below 2e7 for |x| < 5): floor(u) is vcvttps2dq's truncation
  // (u > 0), one operation; for the unflagged lanes the rounding in w crossed no integer, so
  // floor(w) - 4096 is the same.
  __m256i code = kBounded ? _mm256_cvttps_epi32(u)
                          : _mm256_sub_epi32(_mm256_srli_epi32(w, 11), _mm256_set1_epi32(0x45800000 >> 11));
  // Only the top of a segment needs its clamp: a decade's line extended past its upper
  // edge reaches H + 1 before the boundary, while the lower boundary lies at u >= L + 0.13
  // in every segment (u = L + 0.2 between decades), so floor(u) >= L there.
  code = _mm256_min_epi32(code, _mm256_permutevar8x32_epi32(r.h, seg));
  // Negative x in the signed map (blend by the sign bit of x): the mirror, 254 - code, or
  // -1 for code 255 (saturated to 0 when stored).
  if constexpr (kSigned)
    code = _mm256_castps_si256(_mm256_blendv_ps(
        _mm256_castsi256_ps(code), _mm256_castsi256_ps(_mm256_sub_epi32(_mm256_set1_epi32(254), code)), x));
  return code;
}

// The lanes whose ambiguity word is 0 by the table (rare).
[[gnu::noinline]] __m256i fix_codes(const FastRegs& r, __m256 x, __m256i low, __m256i code) {
  int lanes = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(low, _mm256_setzero_si256())));
  if (!lanes) return code;
  alignas(32) float xs[8];
  alignas(32) int32_t cs[8];
  _mm256_store_ps(xs, x);
  _mm256_store_si256(reinterpret_cast<__m256i*>(cs), code);
  for (; lanes; lanes &= lanes - 1) {
    const int l = __builtin_ctz(static_cast<unsigned>(lanes));
    cs[l] = quantize_nearest(*r.map, xs[l]);
  }
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(cs));
}

inline bool any_ambiguous(__m256i low_a, __m256i low_b) {
  const __m256i z = _mm256_cmpeq_epi32(_mm256_min_epu32(low_a, low_b), _mm256_setzero_si256());
  return _mm256_movemask_ps(_mm256_castsi256_ps(z)) != 0;
}

// The exact nearest codes of m (signed map) and v (unsigned map) vectors.
inline void nearest_codes(const FastRegs& fm, const FastRegs& fv, __m256 xm, __m256 xv, __m256i* cm, __m256i* cv) {
  __m256i lm, lv;
  *cm = nearest_code_fast<true, true>(fm, xm, &lm);
  *cv = nearest_code_fast<false, true>(fv, xv, &lv);
  if (any_ambiguous(lm, lv)) [[unlikely]] {
    *cm = fix_codes(fm, xm, lm, *cm);
    *cv = fix_codes(fv, xv, lv, *cv);
  }
}

template <bool kSigned>
inline __m256i nearest_code(const FastRegs& r, __m256 x) {
  __m256i low;
  const __m256i code = nearest_code_fast<kSigned, false>(r, x, &low);
  return any_ambiguous(low, low) ? fix_codes(r, x, low, code) : code;
}

// map.value[code] for 8 codes by arithmetic, the magnitude first (the sign is applied by
// the absmax it is multiplied with: (-x) * s == x * (-s) bit for bit), in ~15 register
// operations (a gather costs about as much as 50 of them here):
//  - j = |code - 127| (signed) or code + 1 (unsigned) directly, not t = 2j + 1: float(j)'s
//    binade is the decade (slot = its biased exponent mod 8) and r = j - 2^floor(log2 j) is
//    the bin, so x = fma(r, a[slot], b[slot]) with a = the bin width, b = bin 0's centre,
//    nudged by a few ulps until every bin's value is x or the float above x (searched
//    here, then asserted for every code);
//  - the +1 ulp mask is indexed by word code & 7 (the permute reads those bits itself) and
//    bit 31 - (code >> 3), which one variable shift moves to the sign bit;
//  - the specials: +1 (signed j = 128, unsigned j = 256) gets a slot with a = 0, b = 1; the
//    zero code (signed j = 0, whose float 0 reads slot 0, the signed decade 1; unsigned
//    code 0, j = 1, sharing +1's slot) is cleared by vpsignd with j or the code, which
//    are 0 exactly there.
struct DequantTables {
  alignas(32) float a[8], b[8];
  alignas(32) uint32_t plus[8];
};

inline int32_t dequant_j(bool is_signed, int code) { return is_signed ? std::abs(code - 127) : code + 1; }
// The kernel's x for j (fp32 operations as in lookup_mag, before the ulp correction).
inline float dequant_x(const DequantTables& d, int32_t j) {
  const float fj = static_cast<float>(j);
  const uint32_t tb = bits_of_f32(fj);
  const float r = fj - f32_of_bits(tb & 0xff800000u);
  const int slot = static_cast<int>(tb >> 23) & 7;
  return std::fma(r, d.a[slot], d.b[slot]);
}

DequantTables build_dequant(const QuantMap& m) {
  const bool sg = m.is_signed;
  DequantTables d{};
  d.a[sg ? 6 : 7] = 0.f;
  d.b[sg ? 6 : 7] = 1.f;
  auto ulps = [&](int code) {
    return int64_t{bits_of_f32(std::fabs(m.value[code]))} - int64_t{bits_of_f32(dequant_x(d, dequant_j(sg, code)))};
  };
  constexpr int kNudge[] = {0, -1, 1, -2, 2, -3, 3, -4, 4, -5, 5, -6, 6, -7, 7, -8, 8};
  for (int k = 0; k < 7; ++k) {
    const int n = sg ? (1 << k) : (2 << k);  // also the decade's first j
    const int slot = sg ? (k + 7) & 7 : k, first = sg ? 127 + n : n - 1;
    const double s = std::pow(10.0, k - 6);
    const uint32_t ab = bits_of_f32(static_cast<float>(0.9 * s / n));
    const uint32_t bb = bits_of_f32(static_cast<float>(s * (0.1 + 0.45 / n)));
    bool found = false;
    for (int da : kNudge) {
      for (int db : kNudge) {
        d.a[slot] = f32_of_bits(ab + da);
        d.b[slot] = f32_of_bits(bb + db);
        found = true;
        for (int c = first; c < first + n && found; ++c) found = ulps(c) == 0 || ulps(c) == 1;
        if (found) break;
      }
      if (found) break;
    }
    LT_ASSERT(found, "no decade constants put the AVX2 dequantization within +1 ulp of the map");
  }
  for (int code = 0; code < 256; ++code) {
    if (code == (sg ? 127 : 0)) continue;  // cleared by vpsignd
    const int64_t u = ulps(code);
    LT_ASSERT(u == 0 || u == 1, "AVX2 dequantization is off the map");
    if (u) d.plus[code & 7] |= 1u << (31 - (code >> 3));
  }
  return d;
}

struct DequantRegs {
  __m256 a, b;
  __m256i plus;
};

inline DequantRegs load_dequant(const QuantMap& q) {
  static const DequantTables tm = build_dequant(signed_dynamic_map());
  static const DequantTables tv = build_dequant(unsigned_dynamic_map());
  const DequantTables& t = q.is_signed ? tm : tv;
  return {_mm256_load_ps(t.a), _mm256_load_ps(t.b), _mm256_load_si256(reinterpret_cast<const __m256i*>(t.plus))};
}

// |map.value[code]|; *sign_src gets a vector whose sign bits are the values' (signed map).
template <bool kSigned>
inline __m256 lookup_mag(const DequantRegs& r, __m256i code, __m256* sign_src) {
  const __m256i d = _mm256_sub_epi32(code, _mm256_set1_epi32(127));
  if constexpr (kSigned) *sign_src = _mm256_castsi256_ps(d);
  const __m256i j = kSigned ? _mm256_abs_epi32(d) : _mm256_add_epi32(code, _mm256_set1_epi32(1));
  const __m256 fj = _mm256_cvtepi32_ps(j);
  const __m256 rr = _mm256_sub_ps(fj, _mm256_and_ps(fj, _mm256_castsi256_ps(_mm256_set1_epi32(0xff800000u))));
  const __m256i slot = _mm256_srli_epi32(_mm256_castps_si256(fj), 23);  // the permutes read bits 0..2
  const __m256 x = _mm256_fmadd_ps(rr, _mm256_permutevar8x32_ps(r.a, slot), _mm256_permutevar8x32_ps(r.b, slot));
  // +1 ulp where bit 31 - (code >> 3) of word (code & 7) is set: shifted to bit 31, spread
  // to all bits (-1), and subtracted.
  const __m256i word = _mm256_permutevar8x32_epi32(r.plus, code);
  const __m256i up = _mm256_srai_epi32(_mm256_sllv_epi32(word, _mm256_srli_epi32(code, 3)), 31);
  const __m256i v = _mm256_sub_epi32(_mm256_castps_si256(x), up);
  return _mm256_castsi256_ps(_mm256_sign_epi32(v, kSigned ? j : code));
}

// map.value[code] * s (s >= 0; ns = -s).
template <bool kSigned>
inline __m256 dequant_scaled(const DequantRegs& r, __m256i code, __m256 s, __m256 ns) {
  __m256 sign_src;
  const __m256 mag = lookup_mag<kSigned>(r, code, &sign_src);
  if constexpr (kSigned) s = _mm256_blendv_ps(s, ns, sign_src);
  return _mm256_mul_ps(mag, s);
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
    const __m256 nam_old = _mm256_set1_ps(-s.m_absmax[b]);
    // The largest v by its bits as unsigned integers: v >= +0 (adamw_math.h), so that is
    // the float maximum, and it is >= bits(+Inf) exactly when some v is +Inf or NaN.
    __m256 am = _mm256_setzero_ps();
    __m256i av = _mm256_setzero_si256();
    for (int64_t j = 0; j < len; j += 8) {
      const int rem = rem_of(len, j);
      const int64_t i = i0 + j;
      const __m256 m_old = dequant_scaled<true>(dm, load_codes(s.m_code + i, rem), am_old, nam_old);
      const __m256 v_old = dequant_scaled<false>(dv, load_codes(s.v_code + i, rem), av_old, av_old);
      __m256 mj, vj;
      moments(c, load_grad(a, i, rem), m_old, v_old, &mj, &vj);
      __m256 abs_m = _mm256_andnot_ps(_mm256_set1_ps(-0.f), mj), vk = vj;
      if (rem < 8) {  // lanes past the block hold code 0's (finite) value: keep them out
        const __m256 k = _mm256_castsi256_ps(lane_mask(rem));
        abs_m = _mm256_and_ps(abs_m, k);
        vk = _mm256_and_ps(vk, k);
      }
      am = _mm256_max_ps(am, abs_m);
      av = _mm256_max_epu32(av, _mm256_castps_si256(vk));
      _mm256_store_ps(m + j, mj);
      _mm256_store_ps(v + j, vj);
    }
    const __m256i inf = _mm256_set1_epi32(0x7f800000);
    if (_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_max_epu32(av, inf), av)))) {
      ++skipped;
      continue;
    }
    const float amax_m = reduce_max(am), amax_v = reduce_max(_mm256_castsi256_ps(av));
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
        nearest_codes(fm, fv, _mm256_mul_ps(mj, im), _mm256_mul_ps(vj, iv), &cm[q], &cv[q]);
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
      __m256i cm, cv;
      nearest_codes(fm, fv, _mm256_mul_ps(mj, im), _mm256_mul_ps(vj, iv), &cm, &cv);
      store_codes(s.m_code + i, cm, rem);
      store_codes(s.v_code + i, cv, rem);
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
  const __m256 sc = _mm256_set1_ps(absmax), nsc = _mm256_set1_ps(-absmax);
  for (int64_t i = 0; i < n; i += 8) {
    const int rem = rem_of(n, i);
    const __m256i c = load_codes(code + i, rem);
    store_f32(out + i, map.is_signed ? dequant_scaled<true>(r, c, sc, nsc) : dequant_scaled<false>(r, c, sc, sc), rem);
  }
}

}  // namespace

extern const AdamWKernels kAdamWKernels{"avx2", adamw8_blocks, adamw32_blocks, quantize, dequantize};

}  // namespace lt::LT_ISA_NS

#include "core/isa_target_end.h"
