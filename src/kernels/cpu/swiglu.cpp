#include "kernels/cpu/swiglu.h"

namespace lt {

void swiglu_forward(float* h, const float* g, const float* u, int64_t n) {
  LT_ISA_PICK(kSwigluKernels).forward(h, g, u, n);
}

void swiglu_backward(float* dg, float* du, const float* dh, const float* g, const float* u,
                     int64_t n) {
  LT_ISA_PICK(kSwigluKernels).backward(dg, du, dh, g, u, n);
}

}  // namespace lt
