// Rotary embedding: checks the shape and picks the ISA level's kernels (rope_simd.cpp).
#include "kernels/cpu/rope.h"

#include "core/error.h"

namespace lt {

void rope_forward(float* x, const float* cos, const float* sin, int64_t B, int64_t S, int64_t H,
                  int64_t D) {
  LT_ASSERT(D % 2 == 0, "rope needs an even head dimension");
  LT_ISA_PICK(kRopeKernels).forward(x, cos, sin, B, S, H, D);
}

void rope_backward(float* dx, const float* cos, const float* sin, int64_t B, int64_t S, int64_t H,
                   int64_t D) {
  LT_ASSERT(D % 2 == 0, "rope needs an even head dimension");
  LT_ISA_PICK(kRopeKernels).backward(dx, cos, sin, B, S, H, D);
}

}  // namespace lt
