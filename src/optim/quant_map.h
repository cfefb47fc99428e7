// The 256-entry dynamic quantization maps of 8-bit AdamW (Dettmers et al., ICLR 2022) and
// exact nearest-code quantization.
//
// A map holds 256 sorted fp32 values in [-1, 1] (signed, for m) or [0, 1] (unsigned, for
// v). Values come in decades 10^-6 .. 10^0; each decade holds twice as many evenly spaced
// bin centres as the one below, so small normalized values keep relative precision.
//
// Nearest code: code(x) = #{ j : x > mid[j] }, where mid[j] is the exact midpoint of
// value[j] and value[j+1] rounded down to fp32, so the code is the truly nearest value for
// every fp32 x (ties go to the lower code). That count is found by an 8-level
// binary search over the midpoints. The search is stored as an implicit (Eytzinger) tree:
// tree[1] is the root, the children of node t are 2t and 2t+1, and after 8 levels the
// node index t lies in [256, 512) with code = t - 256. The SIMD kernels walk the same tree.
#pragma once

#include <cstdint>

namespace lt {

struct QuantMap {
  float value[256];  // sorted ascending; value[code] is the dequantized normalized state
  float mid[256];    // mid[j] = midpoint(value[j], value[j+1]); mid[255] = +inf (never passed)
  float tree[256];   // tree[t], t in [1, 256): the midpoint compared at search node t
};

// Signed map for the first moment m: 127 negative, 0, 127 positive, and +1.
const QuantMap& signed_dynamic_map();
// Unsigned map for the second moment v: 0, 254 positive, and +1.
const QuantMap& unsigned_dynamic_map();

// Nearest code of x (x normalized by the block absmax, so |x| <= 1 up to rounding).
inline uint8_t quantize_nearest(const QuantMap& map, float x) {
  unsigned t = 1;
  for (int level = 0; level < 8; ++level) t = 2 * t + (x > map.tree[t] ? 1u : 0u);
  return static_cast<uint8_t>(t - 256);
}

}  // namespace lt
