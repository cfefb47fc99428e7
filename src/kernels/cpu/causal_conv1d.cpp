#include "kernels/cpu/causal_conv1d.h"

#include <string>

#include "core/error.h"

namespace lt {

void check_causal_conv_shape(const CausalConvShape& s) {
  auto positive = [](int64_t v, const char* name) {
    if (v <= 0)
      throw Error(std::string(name) + " is " + std::to_string(v), "causal conv1d kernel",
                  "pass a positive " + std::string(name));
  };
  positive(s.batch, "batch");
  positive(s.seq, "seq");
  positive(s.channels, "channels");
  positive(s.kernel, "kernel (linear_conv_kernel_dim)");
  if (s.kernel > kMaxConvKernel)
    throw Error("kernel (linear_conv_kernel_dim) is " + std::to_string(s.kernel), "causal conv1d kernel",
                "at most " + std::to_string(kMaxConvKernel) + " taps are supported; raise kMaxConvKernel");
}

void causal_conv1d_silu_forward(float* y, const float* x, const float* w, const CausalConvShape& s) {
  check_causal_conv_shape(s);
  LT_ASSERT(y && x && w);
  LT_ISA_PICK(kCausalConv1dKernels).forward(y, x, w, s);
}

void causal_conv1d_silu_backward(float* dx, float* dw, const float* dy, const float* x,
                                 const float* w, const CausalConvShape& s) {
  check_causal_conv_shape(s);
  LT_ASSERT(dx && dw && dy && x && w);
  LT_ISA_PICK(kCausalConv1dKernels).backward(dx, dw, dy, x, w, s);
}

}  // namespace lt
