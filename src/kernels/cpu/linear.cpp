// Linear layer on top of the oneDNN matmul. The bias is oneDNN's fused bias argument
// (added in the matmul's output pass, no second sweep over y); dbias is a deterministic
// threaded column sum of dy (kernels/cpu/reduce.h).
#include "kernels/cpu/linear.h"

#include "core/aligned_buffer.h"
#include "kernels/cpu/reduce.h"

namespace lt {

namespace {

// dy rounded to bf16 once for both GEMMs of a backward (each would round its own copy).
// Per thread (the free matmuls may be called from several), grown, never shrunk.
thread_local AlignedBuffer<float> t_dy_values;
thread_local AlignedBuffer<bf16> t_dy_bf16;

// dy as both backward GEMMs read it under Precision::BF16: fp32 holding bf16 values where
// either widens (read there in place), else its bf16 copy.
MatmulOperand rounded_dy(const float* dy, size_t n) {
  if (bf16_gemm_widens(MatmulLayout::InputGrad) || bf16_gemm_widens(MatmulLayout::WeightGrad)) {
    if (t_dy_values.size() < n) t_dy_values.resize(n);
    round_to_bf16_values(t_dy_values.data(), dy, n);
    return MatmulOperand{t_dy_values.data(), nullptr, true};
  }
  if (t_dy_bf16.size() < n) t_dy_bf16.resize(n);
  convert_f32_to_bf16(t_dy_bf16.data(), dy, n);
  return MatmulOperand{nullptr, t_dy_bf16.data()};
}

}  // namespace

void linear_forward(float* y, LinearInput x, const float* w, const bf16* w_bf16,
                    const float* bias, int64_t M, int64_t K, int64_t N, Precision p) {
  // y[M,N] = x[M,K] · W^T: W [N,K] is op(B) stored transposed.
  matmul_ex(y, MatmulOperand{x.data, nullptr, x.bf16_exact}, false, MatmulOperand{w, w_bf16}, true, M, N, K, false,
            p, bias);
}

void linear_backward(float* dx, float* dw, float* dbias, const float* dy, LinearInput x,
                     const float* w, const bf16* w_bf16, int64_t M, int64_t K, int64_t N,
                     bool accumulate_dx, Precision p) {
  const MatmulOperand dy_operand =
      p == Precision::BF16 && dx && dw ? rounded_dy(dy, size_t(M * N)) : MatmulOperand{dy, nullptr};
  // dx[M,K] (=|+=) dy[M,N] · W[N,K]
  if (dx) matmul_ex(dx, dy_operand, false, MatmulOperand{w, w_bf16}, false, M, K, N, accumulate_dx, p);
  // dw[N,K] += dy^T · x: dy [M,N] is op(A) stored transposed.
  if (dw)
    matmul_ex(dw, dy_operand, true, MatmulOperand{x.data, nullptr, x.bf16_exact}, false, N, K, M, true, p);
  if (dbias) detail::column_sum_add(dbias, dy, M, N);
}

bool gemm_inputs_rounded(Precision p) {
  // An activation is read by forward's x.W^T and backward's dy^T.x.
  return p == Precision::BF16 &&
         (bf16_gemm_widens(MatmulLayout::Forward) || bf16_gemm_widens(MatmulLayout::WeightGrad));
}

bool round_gemm_input(float* x, int64_t n, Precision p) {
  if (!gemm_inputs_rounded(p)) return false;
  round_to_bf16_values(x, x, size_t(n));
  return true;
}

}  // namespace lt
