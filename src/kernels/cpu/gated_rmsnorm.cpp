#include "kernels/cpu/gated_rmsnorm.h"

#include <cstring>
#include <string>

#include "core/error.h"

namespace lt {

namespace {
void check_shape(int64_t T, int64_t D, const char* where) {
  if (T <= 0 || D <= 0)
    throw Error("shape T=" + std::to_string(T) + ", D=" + std::to_string(D) + " is empty or negative",
                where, "pass positive token and channel counts");
}
}  // namespace

void gated_rmsnorm_forward(float* y, float* rstd, const float* x, const float* z, const float* w,
                           int64_t T, int64_t D, float eps) {
  check_shape(T, D, "gated RMSNorm forward");
  if (!(eps > 0))
    throw Error("eps is " + std::to_string(eps), "gated RMSNorm forward",
                "pass the config's rms_norm_eps (positive)");
  LT_ASSERT(y && rstd && x && z && w);
  LT_ISA_PICK(kGatedRmsnormKernels).forward(y, rstd, x, z, w, T, D, eps);
}

size_t gated_rmsnorm_backward_workspace_floats(int64_t T, int64_t D) {
  check_shape(T, D, "gated RMSNorm backward workspace");
  return size_t((T + kGatedRmsnormTokenChunk - 1) / kGatedRmsnormTokenChunk * D);
}

void gated_rmsnorm_backward(float* dx, float* dz, float* dw, const float* dy, const float* x,
                            const float* z, const float* w, const float* rstd, int64_t T,
                            int64_t D, float* workspace) {
  check_shape(T, D, "gated RMSNorm backward");
  LT_ASSERT(dx && dz && dw && dy && x && z && w && rstd && workspace);
  const int64_t chunks = (T + kGatedRmsnormTokenChunk - 1) / kGatedRmsnormTokenChunk;
  std::memset(workspace, 0, size_t(chunks * D) * sizeof(float));
  LT_ISA_PICK(kGatedRmsnormKernels)
      .backward(dx, dz, workspace, dy, x, z, w, rstd, T, D, kGatedRmsnormTokenChunk);
  for (int64_t k = 0; k < chunks; ++k)
    for (int64_t d = 0; d < D; ++d) dw[d] += workspace[k * D + d];
}

}  // namespace lt
