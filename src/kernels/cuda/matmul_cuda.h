// Matrix products on the GPU through cuBLASLt, row-major like the CPU kernels:
//   C[M,N] = alpha * op(A) op(B) + beta * C
// op(A) is [M,K]: A stored [M,K], or [K,M] under trans_a; op(B) is [K,N]: B stored [K,N],
// or [N,K] under trans_b (a linear layer's weight, [out, in], is B under trans_b).
// A and B are both bf16 (bits) or both fp32; C is fp32; products accumulate in fp32
// (CUBLAS_COMPUTE_32F: tensor cores for bf16, plain fp32 FMAs for fp32, never TF32).
// Device pointers; stream is a cudaStream_t (null: the default stream). Results are the
// same bits on every run on one GPU model (cuBLAS's reproducibility rule; the tests check
// it), not across GPU models.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace lt::cuda {

enum class GemmInput { F32, BF16 };

struct GemmArgs {
  const void* a = nullptr;
  const void* b = nullptr;
  float* c = nullptr;
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  GemmInput input = GemmInput::BF16;
  float alpha = 1.0f, beta = 0.0f;  // beta 1: accumulate onto C (a weight gradient)
};

// What Gemm::run tells cuBLASLt of an operand's alignment: the largest power of two that
// divides its address, at most 256 (cuBLASLt's default assumption).
uint32_t gemm_operand_alignment(const void* p);

// A cuBLASLt handle and its device workspace; one per stream that runs products.
class Gemm {
 public:
  explicit Gemm(size_t workspace_bytes = size_t{32} << 20);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Throws std::runtime_error on a cuBLASLt error or when no algorithm fits the shape.
  void run(const GemmArgs& args, void* stream = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lt::cuda
