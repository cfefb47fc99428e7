// Rotary embedding: checks the shape and picks the ISA level's kernels (rope_simd.cpp).
#include "kernels/cpu/rope.h"

#include "core/error.h"

namespace lt {

namespace {

bool positions_in_table(const int32_t* positions, int64_t B, int64_t S) {
  for (int64_t t = 0; t < B * S; ++t)
    if (positions[t] < 0 || positions[t] >= S) return false;
  return true;
}

}  // namespace

void rope_forward(float* x, const float* cos, const float* sin, int64_t B, int64_t S, int64_t H,
                  int64_t D, const int32_t* positions, int64_t rotary) {
  if (rotary == 0) rotary = D;
  LT_ASSERT(rotary % 2 == 0 && rotary <= D, "rope needs an even rotary dimension within the head");
  LT_ASSERT(!positions || positions_in_table(positions, B, S), "rope: a position outside [0, S)");
  LT_ISA_PICK(kRopeKernels).forward(x, cos, sin, B, S, H, D, rotary, positions);
}

void rope_backward(float* dx, const float* cos, const float* sin, int64_t B, int64_t S, int64_t H,
                   int64_t D, const int32_t* positions, int64_t rotary) {
  if (rotary == 0) rotary = D;
  LT_ASSERT(rotary % 2 == 0 && rotary <= D, "rope needs an even rotary dimension within the head");
  LT_ASSERT(!positions || positions_in_table(positions, B, S), "rope: a position outside [0, S)");
  LT_ISA_PICK(kRopeKernels).backward(dx, cos, sin, B, S, H, D, rotary, positions);
}

}  // namespace lt
