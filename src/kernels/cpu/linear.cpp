// Linear layer on top of the oneDNN matmul. The bias is oneDNN's fused bias argument
// (added in the matmul's output pass, no second sweep over y); dbias is a deterministic
// threaded column sum of dy (kernels/cpu/reduce.h).
#include "kernels/cpu/linear.h"

#include "kernels/cpu/reduce.h"

namespace lt {

void linear_forward(float* y, const float* x, const float* w, const bf16* w_bf16,
                    const float* bias, int64_t M, int64_t K, int64_t N, Precision p) {
  // y[M,N] = x[M,K] · W^T: W [N,K] is op(B) stored transposed.
  matmul_ex(y, MatmulOperand{x, nullptr}, false, MatmulOperand{w, w_bf16}, true, M, N, K, false,
            p, bias);
}

void linear_backward(float* dx, float* dw, float* dbias, const float* dy, const float* x,
                     const float* w, const bf16* w_bf16, int64_t M, int64_t K, int64_t N,
                     bool accumulate_dx, Precision p) {
  // dx[M,K] (=|+=) dy[M,N] · W[N,K]
  if (dx)
    matmul_ex(dx, MatmulOperand{dy, nullptr}, false, MatmulOperand{w, w_bf16}, false, M, K, N,
              accumulate_dx, p);
  // dw[N,K] += dy^T · x: dy [M,N] is op(A) stored transposed.
  if (dw)
    matmul_ex(dw, MatmulOperand{dy, nullptr}, true, MatmulOperand{x, nullptr}, false, N, K, M,
              true, p);
  if (dbias) detail::column_sum_add(dbias, dy, M, N);
}

}  // namespace lt
