// AVX-512 kernels of the fused step (see adamw_kernels.h): the avx512 level's two tables,
// with and without the VBMI + BF16 extensions. The file is compiled for the avx512 level
// (core/isa_target.h); the VBMI and BF16 pieces carry their own wider target attribute and
// run only from the extended table, which the caller picks when cpu_features() has both.
// 16 lanes per vector; the tail of a block is handled with lane masks.
//
// Dequantization, two ways, bitwise the same: with AVX512-VBMI, byte-plane table lookups of
// 64 codes at a time (dequant64_vbmi, ~5.5 operations per 16 values); without it, a
// 256-entry fp32 table in 16 zmm registers read with vpermt2ps (32 entries per op) and
// blends (lookup256, ~18). With AVX512-BF16 the bf16 copy is written by vcvtneps2bf16. One
// body serves both tables: the extended kernel (adamw8_ext) carries the VBMI + BF16 target
// and the body is inlined into it, so the extensions' pieces inline there too.
// Nearest-code quantization is the arithmetic fast path of quant_map.h (register tables, no
// memory access) with the bucket table as an exact fallback for the rare lanes near a
// midpoint; gathers are avoided on the common path because one costs about as much here as
// the rest of the step.
//
// The step is bound by vector operations (Zen 4 issues two 512-bit ones per cycle), so
// every one counts: measured in cache on one Zen 4 core (optimizer_bench, 1 M params),
// 950 M params/s before the unsigned max of v (no compare per vector), vrangeps for |m|,
// vcvttps2udq for floor(u) and one ambiguity test per 64 elements, 1030 after.
// GCC 12 warns about the undefined pass-through operand inside its own intrinsic headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include "optim/adamw_kernels.h"
#include "optim/quant_map.h"

#define LT_ISA_TARGET 2
#include "core/isa_target.h"

#define LT_AVX512_VBMI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi")))
#define LT_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))
// The whole level plus both extensions: clang replaces the file's target by a function's own
// rather than adding to it, and the body inlined here needs all of the level's features.
#define LT_AVX512_VBMI_BF16 __attribute__((target(LT_ISA_TARGET_FLAGS ",avx512vbmi,avx512bf16")))

namespace lt::LT_ISA_NS {

namespace {

struct Table256 {
  __m512 r[16];
};

inline Table256 load_table(const float* t) {
  Table256 x;
  for (int k = 0; k < 16; ++k) x.r[k] = _mm512_loadu_ps(t + 16 * k);
  return x;
}

// t[idx] for idx in [0, 256): eight 32-entry permutes, then select by index bits 5, 6, 7.
inline __m512 lookup256(const Table256& t, __m512i idx) {
  const __mmask16 b5 = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(32));
  const __mmask16 b6 = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(64));
  const __mmask16 b7 = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(128));
  __m512 q[4];
  for (int k = 0; k < 4; ++k) {
    const __m512 lo = _mm512_permutex2var_ps(t.r[4 * k], idx, t.r[4 * k + 1]);
    const __m512 hi = _mm512_permutex2var_ps(t.r[4 * k + 2], idx, t.r[4 * k + 3]);
    q[k] = _mm512_mask_blend_ps(b5, lo, hi);
  }
  const __m512 h0 = _mm512_mask_blend_ps(b6, q[0], q[1]);
  const __m512 h1 = _mm512_mask_blend_ps(b6, q[2], q[3]);
  return _mm512_mask_blend_ps(b7, h0, h1);
}

// Nearest codes by the bucket table (quant_map.h): the same integer steps as
// quant_bucket() / quantize_nearest(), lane by lane, with one gather per vector. Every step
// depends on x alone, so vectors of a block overlap freely (the search this replaces was a
// chain of eight dependent lookup-compare steps). The code is the low byte of each lane
// (the upper ones hold the entry's midpoint key).
inline __m512i nearest_code_signed(const uint32_t* bucket, __m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i s = _mm512_srai_epi32(bits, 31);
  __m512i t = _mm512_srli_epi32(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), kBucketShift);
  t = _mm512_min_epi32(_mm512_max_epi32(t, _mm512_set1_epi32(kBucketFirst)), _mm512_set1_epi32(kBucketLast));
  const __m512i idx = _mm512_add_epi32(_mm512_xor_si512(_mm512_sub_epi32(t, _mm512_set1_epi32(kBucketFirst)), s),
                                       _mm512_set1_epi32(kBucketsPerSide));
  const __m512i key_hi = _mm512_slli_epi32(_mm512_xor_si512(bits, s), 16);
  const __m512i e = _mm512_i32gather_epi32(idx, bucket, 4);
  return _mm512_mask_sub_epi32(e, _mm512_cmpgt_epu32_mask(key_hi, e), e, _mm512_set1_epi32(-1));
}

// Unsigned map. x < 0 lands in bucket 0, whose entry has no midpoint: any key gives code 0
// there, so the key skips the sign flip that the scalar code applies.
inline __m512i nearest_code_unsigned(const uint32_t* bucket, __m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  __m512i t = _mm512_srai_epi32(bits, kBucketShift);
  t = _mm512_min_epi32(_mm512_max_epi32(t, _mm512_set1_epi32(kBucketFirst)), _mm512_set1_epi32(kBucketLast));
  const __m512i idx = _mm512_sub_epi32(t, _mm512_set1_epi32(kBucketFirst));
  const __m512i e = _mm512_i32gather_epi32(idx, bucket, 4);
  return _mm512_mask_sub_epi32(e, _mm512_cmpgt_epu32_mask(_mm512_slli_epi32(bits, 16), e), e,
                               _mm512_set1_epi32(-1));
}

// VBMI dequantization: 64 codes at a time. Each byte of the fp32 table is its own
// 256-byte table (QuantMap::value_byte, 4 zmm); two vpermi2b (128 entries each) and a
// blend on code bit 7 look up one byte plane of 64 codes, and two rounds of unpack
// (bytes, then 16-bit pairs) reassemble the planes into four vectors of 16 floats. The
// unpacks work inside 128-bit lanes, so the codes are first transposed in 4-byte units
// (dword p = 4 * lane + q takes dword 4 * q + lane), which makes vector q hold elements
// 16q .. 16q + 15 in order. About 5.5 operations per 16 values, against 18 for the fp32
// permute chain (lookup256). Bitwise the table value: only bytes move.
LT_AVX512_VBMI inline void dequant64_vbmi(const uint8_t (*plane)[256], __m512i codes, __m512 out[4]) {
  const __m512i tr = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  const __m512i c = _mm512_permutexvar_epi32(tr, codes);
  const __mmask64 hi = _mm512_movepi8_mask(c);
  __m512i pl[4];
  for (int b = 0; b < 4; ++b) {
    const uint8_t* t = plane[b];
    const __m512i lo = _mm512_permutex2var_epi8(_mm512_load_si512(t), c, _mm512_load_si512(t + 64));
    const __m512i up = _mm512_permutex2var_epi8(_mm512_load_si512(t + 128), c, _mm512_load_si512(t + 192));
    pl[b] = _mm512_mask_blend_epi8(hi, lo, up);
  }
  const __m512i lo01 = _mm512_unpacklo_epi8(pl[0], pl[1]), hi01 = _mm512_unpackhi_epi8(pl[0], pl[1]);
  const __m512i lo23 = _mm512_unpacklo_epi8(pl[2], pl[3]), hi23 = _mm512_unpackhi_epi8(pl[2], pl[3]);
  out[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(lo01, lo23));
  out[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(lo01, lo23));
  out[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(hi01, hi23));
  out[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(hi01, hi23));
}

LT_AVX512_VBMI inline __mmask64 byte_mask(int64_t len, int64_t j) {
  const int64_t r = len - j;
  return r >= 64 ? ~__mmask64(0) : (__mmask64(1) << r) - 1;
}

// The arithmetic fast path (quant_map.h: the segment estimate, QuantFastPath): ~14
// register-only operations per vector instead of a gather, which on this CPU costs about
// as much as the rest of the fused step. Lanes whose position lies too near a midpoint are
// flagged; a vector with any flagged lane (rare) takes the table path for those lanes, so
// the result is the exact nearest code either way.
struct FastRegs {
  __m512i bound;  // segment q's upper boundary (bits), by q
  __m512 a, b;    // the segments' lines
  __m512i h;      // the segments' top codes
  const uint32_t* bucket;
};

inline FastRegs load_fast(const QuantMap& q) {
  const QuantFastPath& f = q.fast;
  return {_mm512_castps_si512(_mm512_loadu_ps(f.bound)), _mm512_loadu_ps(f.a), _mm512_loadu_ps(f.b),
          _mm512_loadu_si512(f.h), q.bucket};
}

// kNormalized: x is a block's state over its absmax (the step's case), so |x| <= 1 up to
// one rounding and finite: the segment estimate needs no upper clamp. Any other x must take
// the general form. Code 0 of a negative x may come out as -1, which the stores saturate
// to 0 (the mirror of code 255). *amb gets the lanes that may be wrong: fix_ambiguous
// gives them the exact code (callers test several vectors' lanes at once).
template <bool kSigned, bool kNormalized = false>
inline __m512i nearest_code_fast(const FastRegs& r, __m512 x, __mmask16* amb) {
  const __m512i bits = _mm512_castps_si512(x);
  // a = max(|x|, kSegMinA) (signed map) or max(x, kSegMinA) (unsigned: x <= -0 too, as
  // integers): every a below kSegMinA lies in segment 0 with the zero code, as kSegMinA does.
  // Signed: one vrangeps (imm 0xb: the larger magnitude, sign cleared), equal to the
  // integer max of the bits since both are >= +0.
  const __m512i amin = _mm512_set1_epi32(kSegMinABits);
  const __m512i ab = kSigned ? _mm512_castps_si512(_mm512_range_ps(x, _mm512_castsi512_ps(amin), 0xb))
                             : _mm512_max_epi32(bits, amin);
  // The segment estimate, y = 2^23 + q, and its fix-up by one compare.
  __m512 y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ab), _mm512_set1_ps(kSegK), _mm512_set1_ps(kSegC));
  if constexpr (!kNormalized) y = _mm512_min_ps(y, _mm512_set1_ps(kSegTop));
  const __m512i q = _mm512_castps_si512(y);
  const __m512i seg = _mm512_mask_add_epi32(q, _mm512_cmpgt_epi32_mask(ab, _mm512_permutexvar_epi32(q, r.bound)), q,
                                            _mm512_set1_epi32(1));
  const __m512 u = _mm512_fmadd_ps(_mm512_castsi512_ps(ab), _mm512_permutexvar_ps(seg, r.a),
                                   _mm512_permutexvar_ps(seg, r.b));
  // The ambiguity test: w = u + 4096 lies in [4096, 8192) where floats step by 2^-11, so
  // its low 11 bits are 0 when u lies within 2^-12 (kFastAmbiguity) of an integer (inf
  // too); those lanes take the table. floor(u) is vcvttps2udq's truncation (u > 0): for
  // the other lanes the rounding in w crossed no integer, so floor(w) - 4096 is the same.
  // u >= 2^32 (a > 1 in the general form) converts to 0xffffffff, which the unsigned
  // clamp to the segment's top code takes like any code above it.
  // A negative x crosses a boundary when |x| >= the mirrored midpoint, which is the
  // boundary itself or the float above it, so |x| > bound is right for every |x| but the
  // boundary, which lies at an integer of u (flagged).
  const __m512i w = _mm512_castps_si512(_mm512_add_ps(u, _mm512_set1_ps(4096.f)));
  *amb = _mm512_testn_epi32_mask(w, _mm512_set1_epi32(0x7ff));
  __m512i code = _mm512_min_epu32(_mm512_cvttps_epu32(u), _mm512_permutexvar_epi32(seg, r.h));
  if constexpr (kSigned)  // negative x: the mirror, 254 - code
    code = _mm512_mask_sub_epi32(code, _mm512_movepi32_mask(bits), _mm512_set1_epi32(254), code);
  return code;
}

// The exact codes of the lanes in amb, from the table (its entries hold the midpoint's key
// above the code).
template <bool kSigned>
inline __m512i fix_ambiguous(const FastRegs& r, __m512 x, __m512i code, __mmask16 amb) {
  const __m512i exact = kSigned ? nearest_code_signed(r.bucket, x) : nearest_code_unsigned(r.bucket, x);
  return _mm512_mask_and_epi32(code, amb, exact, _mm512_set1_epi32(0xff));
}

template <bool kSigned, bool kNormalized = false>
inline __m512i nearest_code(const FastRegs& r, __m512 x) {
  __mmask16 amb;
  const __m512i code = nearest_code_fast<kSigned, kNormalized>(r, x, &amb);
  return amb ? fix_ambiguous<kSigned>(r, x, code, amb) : code;
}

inline __mmask16 tail_mask(int64_t len, int64_t j) {
  const int64_t r = len - j;
  return r >= 16 ? __mmask16(0xffff) : __mmask16((1u << r) - 1);
}

inline __m512 load_f32(const float* p, __mmask16 k) {
  return k == 0xffff ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(k, p);
}
inline void store_f32(float* p, __m512 x, __mmask16 k) {
  if (k == 0xffff) _mm512_storeu_ps(p, x);
  else _mm512_mask_storeu_ps(p, k, x);
}
inline __m512i load_codes(const uint8_t* p, __mmask16 k) {
  return _mm512_cvtepu8_epi32(k == 0xffff ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)) : _mm_maskz_loadu_epi8(k, p));
}
inline void store_codes(uint8_t* p, __m512i code, __mmask16 k) {
  const __m128i c = _mm512_cvtepi32_epi8(_mm512_max_epi32(code, _mm512_setzero_si512()));
  if (k == 0xffff) _mm_storeu_si128(reinterpret_cast<__m128i*>(p), c);
  else _mm_mask_storeu_epi8(p, k, c);
}
// 64 codes (four vectors of 16, in order; -1 saturates to 0) to 64 bytes: the packs work
// inside 128-bit lanes, so lane l holds codes 4l .. 4l + 3 of every vector; one dword
// permute restores the order.
inline void store_codes64(uint8_t* p, const __m512i c[4]) {
  const __m512i b = _mm512_packus_epi16(_mm512_packus_epi32(c[0], c[1]), _mm512_packus_epi32(c[2], c[3]));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  _mm512_storeu_si512(p, _mm512_permutexvar_epi32(order, b));
}

inline __m512 load_grad(const AdamWTensorArgs& a, int64_t i, __mmask16 k) {
  if (a.grad_f32) return load_f32(a.grad_f32 + i, k);
  const __m256i h = k == 0xffff ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.grad_bf16 + i))
                                : _mm256_maskz_loadu_epi16(k, a.grad_bf16 + i);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// bf16 round to nearest even, NaN kept a (quiet) NaN: the same integer recipe as
// lt::f32_to_bf16, so both kernels write the same bits (vcvtneps2bf16 would flush denormals).
inline void store_bf16(bf16* out, __m512 p, __mmask16 k) {
  const __m512i u = _mm512_castps_si512(p);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  const __mmask16 nan = _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x400000));
  const __m256i h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
  if (k == 0xffff) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), h);
  else _mm256_mask_storeu_epi16(out, k, h);
}

// The bf16 copy by vcvtneps2bf16: the same round-to-nearest-even and quiet-NaN bits as
// store_bf16, except that it treats denormal inputs as zero, so a vector holding a
// denormal takes store_bf16 (rare). 3 operations per vector against 9.
LT_AVX512_BF16 inline void store_bf16_native(bf16* out, __m512 p, __mmask16 k) {
  if (_mm512_fpclass_ps_mask(p, 0x20)) [[unlikely]] {  // 0x20: denormal
    store_bf16(out, p, k);
    return;
  }
  const __m256i h = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(p));
  if (k == 0xffff) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), h);
  else _mm256_mask_storeu_epi16(out, k, h);
}

struct Consts {
  __m512 b1, omb1, b2, omb2, eps, decay, neg_step, isbc2, clip;
};

inline Consts broadcast(const AdamWStepConsts& c) {
  return {_mm512_set1_ps(c.beta1), _mm512_set1_ps(c.one_minus_beta1), _mm512_set1_ps(c.beta2),
          _mm512_set1_ps(c.one_minus_beta2), _mm512_set1_ps(c.eps), _mm512_set1_ps(c.decay),
          _mm512_set1_ps(-c.step_size), _mm512_set1_ps(c.inv_sqrt_bc2), _mm512_set1_ps(c.clip)};
}

// m, v from g and the old states (adamw_math.h).
inline void moments(const Consts& c, __m512 g, __m512 m_old, __m512 v_old, __m512* m, __m512* v) {
  g = _mm512_mul_ps(g, c.clip);
  *m = _mm512_fmadd_ps(c.b1, m_old, _mm512_mul_ps(c.omb1, g));
  *v = _mm512_fmadd_ps(c.b2, v_old, _mm512_mul_ps(_mm512_mul_ps(c.omb2, g), g));
}

// The lanes whose v is NaN or +Inf.
inline __mmask16 nonfinite(__m512 v) { return _mm512_cmp_ps_mask(v, _mm512_set1_ps(INFINITY), _CMP_NLT_UQ); }

inline __m512 new_param(const Consts& c, __m512 p, __m512 m, __m512 v) {
  const __m512 denom = _mm512_fmadd_ps(_mm512_sqrt_ps(v), c.isbc2, c.eps);
  return _mm512_fmadd_ps(c.neg_step, _mm512_div_ps(m, denom), _mm512_mul_ps(p, c.decay));
}

// The 8-bit step over blocks [first_block, last_block). kExt: the VBMI dequantization and the
// vcvtneps2bf16 copy. Always inlined, so that in adamw8_ext, which carries those targets,
// their pieces inline too (they cannot inline into a function of the level's target alone).
template <bool kExt>
[[gnu::always_inline]] inline int64_t adamw8_impl(const AdamWTensorArgs& a, const AdamW8State& s,
                                                  const AdamWStepConsts& sc, int64_t first_block, int64_t last_block) {
  const QuantMap& qm = signed_dynamic_map();
  const QuantMap& qv = unsigned_dynamic_map();
  const Table256 m_val = load_table(qm.value), v_val = load_table(qv.value);
  const FastRegs fm = load_fast(qm), fv = load_fast(qv);
  const Consts c = broadcast(sc);
  alignas(64) float m[kMaxAdamWBlock], v[kMaxAdamWBlock];
  int64_t skipped = 0;
  for (int64_t b = first_block; b < last_block; ++b) {
    const int64_t i0 = b * a.block, len = std::min(a.block, a.n - i0);
    const __m512 am_old = _mm512_set1_ps(s.m_absmax[b]), av_old = _mm512_set1_ps(s.v_absmax[b]);
    // The largest v by its bits as unsigned integers: v >= +0 (adamw_math.h), so that is the
    // float maximum, and it is >= bits(+Inf) exactly when some v is +Inf or NaN (the scalar
    // kernel's test), with no compare per vector.
    __m512 am = _mm512_setzero_ps();
    __m512i av = _mm512_setzero_si512();
    // 64 elements at a time: with VBMI the old states of all four vectors come from one
    // byte-plane lookup per map (dequant64_vbmi), without it vector by vector (lookup256).
    for (int64_t j = 0; j < len; j += 64) {
      __m512 m_unit[4], v_unit[4];  // map.value[code]
      if constexpr (kExt) {
        const __mmask64 kb = byte_mask(len, j);
        dequant64_vbmi(qm.value_byte, _mm512_maskz_loadu_epi8(kb, s.m_code + i0 + j), m_unit);
        dequant64_vbmi(qv.value_byte, _mm512_maskz_loadu_epi8(kb, s.v_code + i0 + j), v_unit);
      }
      for (int q = 0; q < 4 && j + 16 * q < len; ++q) {
        const int64_t jq = j + 16 * q, i = i0 + jq;
        const __mmask16 k = tail_mask(len, jq);
        if constexpr (!kExt) {
          m_unit[q] = lookup256(m_val, load_codes(s.m_code + i, k));
          v_unit[q] = lookup256(v_val, load_codes(s.v_code + i, k));
        }
        __m512 mj, vj;
        moments(c, load_grad(a, i, k), _mm512_mul_ps(m_unit[q], am_old), _mm512_mul_ps(v_unit[q], av_old), &mj, &vj);
        // Masked-off lanes hold g = 0 and code 0 -> finite values; keep them out of the max.
        am = _mm512_mask_range_ps(am, k, am, mj, 0xb);  // max(|am|, |m|), sign cleared
        av = _mm512_mask_max_epu32(av, k, av, _mm512_castps_si512(vj));
        _mm512_store_ps(m + jq, mj);
        _mm512_store_ps(v + jq, vj);
      }
    }
    const uint32_t av_bits = _mm512_reduce_max_epu32(av);
    if (av_bits >= 0x7f800000u) {
      ++skipped;
      continue;
    }
    const float amax_m = _mm512_reduce_max_ps(am), amax_v = std::bit_cast<float>(av_bits);
    const __m512 im = _mm512_set1_ps(amax_m > 0 ? 1.0f / amax_m : 0.f);
    const __m512 iv = _mm512_set1_ps(amax_v > 0 ? 1.0f / amax_v : 0.f);
    // Parameter update and requantization, kQuad vectors at a time (then single vectors
    // for the rest of the block, the last one masked).
    constexpr int kQuad = 4;
    int64_t j = 0;
    for (; j + 16 * kQuad <= len; j += 16 * kQuad) {
      __m512 xm[kQuad], xv[kQuad];
      __m512i cm[kQuad], cv[kQuad];
      for (int q = 0; q < kQuad; ++q) {
        const int64_t jj = j + 16 * q, i = i0 + jj;
        const __m512 mj = _mm512_load_ps(m + jj), vj = _mm512_load_ps(v + jj);
        const __m512 p = new_param(c, _mm512_loadu_ps(a.param + i), mj, vj);
        _mm512_storeu_ps(a.param + i, p);
        if (a.out_bf16) {
          if constexpr (kExt) store_bf16_native(a.out_bf16 + i, p, 0xffff);
          else store_bf16(a.out_bf16 + i, p, 0xffff);
        }
        xm[q] = _mm512_mul_ps(mj, im);
        xv[q] = _mm512_mul_ps(vj, iv);
      }
      __mmask16 ambm[kQuad], ambv[kQuad];
      for (int q = 0; q < kQuad; ++q) {
        cm[q] = nearest_code_fast<true, true>(fm, xm[q], &ambm[q]);
        cv[q] = nearest_code_fast<false, true>(fv, xv[q], &ambv[q]);
      }
      // One test for all eight vectors: ambiguous lanes are rare.
      if ((ambm[0] | ambm[1] | ambm[2] | ambm[3]) | (ambv[0] | ambv[1] | ambv[2] | ambv[3])) [[unlikely]] {
        for (int q = 0; q < kQuad; ++q) {
          cm[q] = fix_ambiguous<true>(fm, xm[q], cm[q], ambm[q]);
          cv[q] = fix_ambiguous<false>(fv, xv[q], cv[q], ambv[q]);
        }
      }
      store_codes64(s.m_code + i0 + j, cm);
      store_codes64(s.v_code + i0 + j, cv);
    }
    for (; j < len; j += 16) {
      const __mmask16 k = tail_mask(len, j);
      const int64_t i = i0 + j;
      const __m512 mj = _mm512_load_ps(m + j), vj = _mm512_load_ps(v + j);
      const __m512 p = new_param(c, load_f32(a.param + i, k), mj, vj);
      store_f32(a.param + i, p, k);
      if (a.out_bf16) {
        if constexpr (kExt) store_bf16_native(a.out_bf16 + i, p, k);
        else store_bf16(a.out_bf16 + i, p, k);
      }
      const __m512 xm = _mm512_mul_ps(mj, im), xv = _mm512_mul_ps(vj, iv);
      const __m512i cm = nearest_code<true, true>(fm, xm), cv = nearest_code<false, true>(fv, xv);
      store_codes(s.m_code + i, cm, k);
      store_codes(s.v_code + i, cv, k);
    }
    s.m_absmax[b] = amax_m;
    s.v_absmax[b] = amax_v;
  }
  return skipped;
}

LT_AVX512_VBMI void dequantize_vbmi(const QuantMap& map, const uint8_t* code, float absmax, int64_t n, float* out) {
  const __m512 sc = _mm512_set1_ps(absmax);
  for (int64_t j = 0; j < n; j += 64) {
    const __mmask64 k = byte_mask(n, j);
    __m512 x[4];
    dequant64_vbmi(map.value_byte, _mm512_maskz_loadu_epi8(k, code + j), x);
    for (int q = 0; q < 4 && j + 16 * q < n; ++q)
      _mm512_mask_storeu_ps(out + j + 16 * q, tail_mask(n, j + 16 * q), _mm512_mul_ps(x[q], sc));
  }
}

int64_t adamw32_blocks(const AdamWTensorArgs& a, const AdamW32State& s, const AdamWStepConsts& sc,
                                 int64_t first_block, int64_t last_block) {
  const Consts c = broadcast(sc);
  int64_t skipped = 0;
  alignas(64) float m[kMaxAdamWBlock], v[kMaxAdamWBlock];
  for (int64_t b = first_block; b < last_block; ++b) {
    const int64_t i0 = b * a.block, len = std::min(a.block, a.n - i0);
    __mmask16 bad = 0;
    for (int64_t j = 0; j < len; j += 16) {
      const __mmask16 k = tail_mask(len, j);
      const int64_t i = i0 + j;
      __m512 mj, vj;
      moments(c, load_grad(a, i, k), load_f32(s.m + i, k), load_f32(s.v + i, k), &mj, &vj);
      bad |= k & nonfinite(vj);
      _mm512_store_ps(m + j, mj);
      _mm512_store_ps(v + j, vj);
    }
    if (bad) {
      ++skipped;
      continue;
    }
    for (int64_t j = 0; j < len; j += 16) {
      const __mmask16 k = tail_mask(len, j);
      const int64_t i = i0 + j;
      const __m512 mj = _mm512_load_ps(m + j), vj = _mm512_load_ps(v + j);
      const __m512 p = new_param(c, load_f32(a.param + i, k), mj, vj);
      store_f32(a.param + i, p, k);
      store_f32(s.m + i, mj, k);
      store_f32(s.v + i, vj, k);
      if (a.out_bf16) store_bf16(a.out_bf16 + i, p, k);
    }
  }
  return skipped;
}

void quantize(const QuantMap& map, const float* x, uint8_t* code, int64_t n) {
  const FastRegs r = load_fast(map);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask(n, i);
    const __m512 xi = _mm512_maskz_loadu_ps(k, x + i);
    store_codes(code + i, map.is_signed ? nearest_code<true>(r, xi) : nearest_code<false>(r, xi), k);
  }
}

// Without VBMI: the fp32 permute chain the plain kernel uses (lookup256).
void dequantize(const QuantMap& map, const uint8_t* code, float absmax, int64_t n, float* out) {
  const Table256 t = load_table(map.value);
  const __m512 sc = _mm512_set1_ps(absmax);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask(n, i);
    _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(lookup256(t, load_codes(code + i, k)), sc));
  }
}

int64_t adamw8_plain(const AdamWTensorArgs& a, const AdamW8State& s, const AdamWStepConsts& sc,
                     int64_t first_block, int64_t last_block) {
  return adamw8_impl<false>(a, s, sc, first_block, last_block);
}
LT_AVX512_VBMI_BF16 int64_t adamw8_ext(const AdamWTensorArgs& a, const AdamW8State& s, const AdamWStepConsts& sc,
                                       int64_t first_block, int64_t last_block) {
  return adamw8_impl<true>(a, s, sc, first_block, last_block);
}

}  // namespace

extern const AdamWKernels kAdamWKernels{"avx512", adamw8_plain, adamw32_blocks, quantize, dequantize};
extern const AdamWKernels kAdamWKernelsVbmiBf16{"avx512+vbmi+bf16", adamw8_ext, adamw32_blocks, quantize,
                                                dequantize_vbmi};

}  // namespace lt::LT_ISA_NS

#include "core/isa_target_end.h"
