// The 256-entry dynamic quantization maps of 8-bit AdamW (Dettmers et al., ICLR 2022) and
// exact nearest-code quantization.
//
// A map holds 256 sorted fp32 values in [-1, 1] (signed, for m) or [0, 1] (unsigned, for
// v). Values come in decades 10^-6 .. 10^0; each decade holds twice as many evenly spaced
// bin centres as the one below, so small normalized values keep relative precision.
//
// Nearest code: code(x) = #{ j : x > mid[j] }, where mid[j] is the exact midpoint of
// value[j] and value[j+1] rounded down to fp32, so the code is the truly nearest value for
// every fp32 x (ties go to the lower code).
//
// Two ways to evaluate that count, equal for every non-NaN fp32 x (tested):
//  - quantize_nearest_search: an 8-level binary search over the midpoints, stored as an
//    implicit (Eytzinger) tree: tree[1] is the root, the children of node t are 2t and
//    2t+1, after 8 levels t lies in [256, 512) and code = t - 256. The reference, and what
//    the CUDA kernel walks.
//  - quantize_nearest: one table lookup and one integer compare (the CPU kernels). The
//    eight dependent search steps cost ~70% of the fused step; the lookup is independent
//    of everything but x.
//
// The bucket table. Let A = the bits of |x| (ordered like |x|), s = the sign, and
// key = s ? -1 - A : A, an integer ordered exactly like x (x < y <=> key(x) < key(y)).
// A bucket is one value of A >> kBucketShift: a binade's exponent and its top 7 mantissa
// bits, 2^16 consecutive keys. A bucket spans at most 1/128 of its binade, less than the
// gap between neighbouring midpoints anywhere in either map (the densest decade has 128
// bins over [0.1, 1], gaps 0.007 against a bucket width <= 0.0039), so it contains at
// most one midpoint; the builder checks this. Binades below 2^-24 and above [1, 2) hold no
// midpoint and are clamped into the first and last bucket. Each entry packs
//   lo  (bits 0..15):  the count of midpoints below the bucket,
//   thr (bits 16..31): the low 16 key bits of the bucket's midpoint, or 0xffff if none,
// and code = lo + ((key << 16) > entry), unsigned: for keys of the same bucket,
// key_low > thr <=> (key_low << 16) > (thr << 16 | lo) because lo < 2^16. A midpoint whose
// low key bits are 0xffff is the bucket's last key, which no x in the bucket exceeds, so it
// is encoded as "none" and counted in the next bucket's lo.
// Signed map: buckets -kBucketsPerSide.. for x < 0 (index kBucketsPerSide - 1 - ia) and
// kBucketsPerSide + ia for x >= 0. Unsigned map: kBucketsPerSide buckets; every x <= -0
// clamps into bucket 0, below the first midpoint (> 0).
#pragma once

#include <cstdint>
#include <cstring>

namespace lt {

inline constexpr int kBucketShift = 16;                     // 23 mantissa bits - 7 kept
inline constexpr int32_t kBucketFirst = (127 - 24) << 7;    // A >> 16 of 2^-24
inline constexpr int32_t kBucketLast = (128 << 7) - 1;      // A >> 16 of the top of [1, 2)
inline constexpr int32_t kBucketsPerSide = kBucketLast - kBucketFirst + 1;  // 3200

// The arithmetic fast path of the AVX-512 and AVX2 kernels (adamw_kernels_avx512.cpp,
// _avx2.cpp), on a = |x|. Within decade k the midpoints sit (up to fp32 rounding) at the
// integers of u = a * N_k / (0.9 * 10^(k-6)) + const, and the midpoint to the next decade
// at one more integer, so code = min(floor(fma(a, A, B)), H) with one line (A, B) and top
// code H per segment, B holding the decade's first code. Segment 0 (below the first
// midpoint) gives the zero code and segment 8 (above the midpoint below 1) code 255. The
// fp32 evaluation of u is off the true position by < 1e-4 (rounded A, B and midpoints), so
// a lane whose u lies within kFastAmbiguity of an integer may be wrong; the kernel then
// takes the table for those lanes (< 1% of vectors). Negative x in the signed map use the
// mirror: code = max(254 - code(|x|), 0).
//
// The segment estimate: the segment of a is found from the float's bits read as an
// integer, a piecewise-linear log2 (low by < 0.087, so log10 low by < 0.026):
// q = round(0.988 * (L + 38.23) - 31), L the log10 estimate, clamped to [0, 7], is the
// segment or the one below it (every segment spans most of a decade and the boundaries lie
// 0.006 .. 0.28 decades above the powers of ten; q's rounding points stay inside that
// band, by >= 0.2 decades, for L in [-7, 1]), so one compare against segment q's upper
// boundary fixes it up. The fma evaluates q next to 2^23, where floats step by 1, so it
// rounds to the integer and the low mantissa bits are q itself; the 0.988 stretch stands
// in for the fraction of the offset, which a constant next to 2^23 cannot hold. a is first
// raised to kSegMinA (bits kSegMinABits, 1.5e-7), which lies in segment 0 at estimate 0
// (the builder checks both). Tested exhaustively against the table.
inline constexpr float kFastAmbiguity = 1.0f / 4096;
inline constexpr float kSegK = 0.30102999566f * (1 - 0.012f) / 8388608.f, kSegC = 8388577.f;
inline constexpr int32_t kSegMinABits = 0x34210fb0;
// The estimate's clamp at 2^23 + 7 (segment 7) for any x; the step's |x| <= 1 never reaches it.
inline constexpr float kSegTop = 8388615.f;

// The fast path's tables, by segment. The 9 segments share 8 entries, segment 8 reading
// entry 0 (an 8-lane permute reads index bits 0..2; a 16-lane one reads bits 0..3, so
// entries 8..15 repeat 0..7): entry 0's line is u = zero + 0.5 at a = 0 rising to zero + 1
// at segment 0's upper boundary (so that boundary lies at an integer of u like every other
// one, and its lanes are flagged), which is > 10^6 in segment 8; with the top code 255 that
// gives the zero code in segment 0 and 255 in segment 8. Only the top of a segment needs
// its clamp: a decade's line extended past its upper edge reaches H + 1 before the
// boundary, while the lower boundary lies at u >= L + 0.13 in every segment (L the
// segment's first code), so floor(u) >= L there. A negative x crosses a boundary when
// |x| >= the mirrored midpoint, which is the boundary itself or the float above it
// (midpoints round down on both sides), so |x| > bound is right for every |x| but the
// boundary, which lies at an integer of u (flagged).
struct QuantFastPath {
  float bound[16];  // segment q's upper boundary: the midpoint into decade 0, between decades, below +1
  float a[16], b[16];
  int32_t h[16];
};

struct QuantMap {
  float value[256];  // sorted ascending; value[code] is the dequantized normalized state
  float mid[256];    // mid[j] = midpoint(value[j], value[j+1]); mid[255] = +inf (never passed)
  float tree[256];   // tree[t], t in [1, 256): the midpoint compared at search node t
  // Byte b (little-endian, 0 = lowest) of the bits of value[code]: the tables the AVX-512
  // VBMI kernel looks up 64 codes at a time (vpermi2b) and reassembles into fp32.
  alignas(64) uint8_t value_byte[4][256];
  bool is_signed;
  uint32_t bucket[2 * kBucketsPerSide];  // signed: both sides; unsigned: the first half
  QuantFastPath fast;
};

// Signed map for the first moment m: 127 negative, 0, 127 positive, and +1.
const QuantMap& signed_dynamic_map();
// Unsigned map for the second moment v: 0, 254 positive, and +1.
const QuantMap& unsigned_dynamic_map();

// Reference: binary search over the midpoints.
inline uint8_t quantize_nearest_search(const QuantMap& map, float x) {
  unsigned t = 1;
  for (int level = 0; level < 8; ++level) t = 2 * t + (x > map.tree[t] ? 1u : 0u);
  return static_cast<uint8_t>(t - 256);
}

// The bucket index of x and its key shifted left by 16 (see above). The AVX-512 kernel
// evaluates the same integer steps lane by lane.
inline uint32_t quant_bucket(bool is_signed, float x, uint32_t* key_hi) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const int32_t s = static_cast<int32_t>(bits) >> 31;  // 0 or -1
  *key_hi = (bits ^ static_cast<uint32_t>(s)) << 16;   // low 16 bits of key, as s ? ~A : A
  if (is_signed) {
    int32_t t = static_cast<int32_t>((bits & 0x7fffffffu) >> kBucketShift);
    t = t < kBucketFirst ? kBucketFirst : (t > kBucketLast ? kBucketLast : t);
    return static_cast<uint32_t>(((t - kBucketFirst) ^ s) + kBucketsPerSide);
  }
  int32_t t = static_cast<int32_t>(bits) >> kBucketShift;  // x < 0: negative, clamps to 0
  t = t < kBucketFirst ? kBucketFirst : (t > kBucketLast ? kBucketLast : t);
  return static_cast<uint32_t>(t - kBucketFirst);
}

// Nearest code of x (x normalized by the block absmax, so |x| <= 1 up to rounding); equal
// to quantize_nearest_search for every non-NaN x.
inline uint8_t quantize_nearest(const QuantMap& map, float x) {
  uint32_t key_hi;
  const uint32_t e = map.bucket[quant_bucket(map.is_signed, x, &key_hi)];
  return static_cast<uint8_t>(e + (key_hi > e ? 1u : 0u));
}

}  // namespace lt
