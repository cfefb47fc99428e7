#include "kernels/cuda/matmul_cuda.h"

#include <stdexcept>
#include <string>

#include "kernels/cuda/cublaslt_api.cuh"
#include "kernels/cuda/cuda_check.cuh"

namespace lt::cuda {
namespace {

void check_lt(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS)
    // The status names live in libcublas, which nothing else here needs: the number, then
    // (cublas_api.h's cublasStatus_t lists them).
    throw std::runtime_error(std::string("cuBLASLt error in ") + call + ": cublasStatus_t " +
                             std::to_string(static_cast<int>(s)));
}
#define LT_CUBLAS_CHECK(call) check_lt((call), #call)

// Descriptors live for one call; these free them on every path out.
struct LayoutHandle {
  cublasLtMatrixLayout_t h = nullptr;
  ~LayoutHandle() { if (h) cublaslt().layout_destroy(h); }
};
struct DescHandle {
  cublasLtMatmulDesc_t h = nullptr;
  ~DescHandle() { if (h) cublaslt().desc_destroy(h); }
};
struct PreferenceHandle {
  cublasLtMatmulPreference_t h = nullptr;
  ~PreferenceHandle() { if (h) cublaslt().preference_destroy(h); }
};

void prefer_alignment(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t which, const void* p) {
  const uint32_t bytes = gemm_operand_alignment(p);
  LT_CUBLAS_CHECK(cublaslt().preference_set_attribute(pref, which, &bytes, sizeof bytes));
}

}  // namespace

uint32_t gemm_operand_alignment(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lowest_bit = address & (~address + 1);  // the largest power of two that divides it (0: none)
  return lowest_bit == 0 || lowest_bit > 256 ? 256u : static_cast<uint32_t>(lowest_bit);
}

struct Gemm::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

Gemm::Gemm(size_t workspace_bytes) : impl_(std::make_unique<Impl>()) {
  LT_CUBLAS_CHECK(cublaslt().create(&impl_->handle));
  impl_->workspace_bytes = workspace_bytes;
  if (workspace_bytes) {
    const cudaError_t e = cudaMalloc(&impl_->workspace, workspace_bytes);
    if (e != cudaSuccess) {
      cublaslt().destroy(impl_->handle);
      LT_CUDA_CHECK(e);
    }
  }
}

Gemm::~Gemm() {
  cudaFree(impl_->workspace);
  cublaslt().destroy(impl_->handle);
}

void Gemm::run(const GemmArgs& g, void* stream) {
  if (g.m <= 0 || g.n <= 0) return;
  if (g.k < 0 || !g.c || (g.k > 0 && (!g.a || !g.b)))
    throw std::runtime_error("Gemm::run: K " + std::to_string(g.k) + " and A, B, C must be given");
  if (g.k == 0) {  // the empty sum, as on the CPU: C = beta C
    if (g.beta == 0.0f)
      LT_CUDA_CHECK(cudaMemsetAsync(g.c, 0, static_cast<size_t>(g.m * g.n) * sizeof(float), as_stream(stream)));
    else if (g.beta != 1.0f)
      throw std::runtime_error("Gemm::run: K 0 with beta other than 0 or 1");
    return;
  }
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T. A row-major matrix
  // read as column-major is its transpose, so cuBLASLt's first operand is B as stored
  // (transposed when trans_b), its second A, and C is [N, M] column-major with ld N.
  const cudaDataType_t in = g.input == GemmInput::BF16 ? CUDA_R_16BF : CUDA_R_32F;
  const uint64_t m = static_cast<uint64_t>(g.m), n = static_cast<uint64_t>(g.n), k = static_cast<uint64_t>(g.k);
  LayoutHandle first, second, out;
  // B stored [K,N] (ld N) or [N,K] (ld K), read column-major: [N,K] or [K,N].
  if (g.trans_b)
    LT_CUBLAS_CHECK(cublaslt().layout_create(&first.h, in, k, n, static_cast<int64_t>(k)));
  else
    LT_CUBLAS_CHECK(cublaslt().layout_create(&first.h, in, n, k, static_cast<int64_t>(n)));
  // A stored [M,K] (ld K) or [K,M] (ld M), read column-major: [K,M] or [M,K].
  if (g.trans_a)
    LT_CUBLAS_CHECK(cublaslt().layout_create(&second.h, in, m, k, static_cast<int64_t>(m)));
  else
    LT_CUBLAS_CHECK(cublaslt().layout_create(&second.h, in, k, m, static_cast<int64_t>(k)));
  LT_CUBLAS_CHECK(cublaslt().layout_create(&out.h, CUDA_R_32F, n, m, static_cast<int64_t>(n)));

  DescHandle desc;
  LT_CUBLAS_CHECK(cublaslt().desc_create(&desc.h, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_first = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT_CUBLAS_CHECK(cublaslt().desc_set_attribute(desc.h, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first));
  LT_CUBLAS_CHECK(cublaslt().desc_set_attribute(desc.h, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second));

  PreferenceHandle pref;
  LT_CUBLAS_CHECK(cublaslt().preference_create(&pref.h));
  LT_CUBLAS_CHECK(cublaslt().preference_set_attribute(pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &impl_->workspace_bytes, sizeof impl_->workspace_bytes));
  // The heuristic assumes 256-byte aligned operands unless told otherwise, and may then
  // pick an algorithm that fails or faults on ours (activations packed back to back by
  // element count are 4-byte aligned at worst): tell it each one's alignment. cuBLASLt's
  // A is our B, its B our A, its C and D our C.
  prefer_alignment(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, g.b);
  prefer_alignment(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, g.a);
  prefer_alignment(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, g.c);
  prefer_alignment(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, g.c);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  LT_CUBLAS_CHECK(cublaslt().algo_get_heuristic(impl_->handle, desc.h, first.h, second.h, out.h, out.h, pref.h, 1,
                                                 &result, &found));
  if (found == 0)
    throw std::runtime_error("Gemm::run: cuBLASLt has no algorithm for M " + std::to_string(g.m) + ", N " +
                             std::to_string(g.n) + ", K " + std::to_string(g.k));
  LT_CUBLAS_CHECK(cublaslt().matmul(impl_->handle, desc.h, &g.alpha, g.b, first.h, g.a, second.h, &g.beta, g.c, out.h,
                                 g.c, out.h, &result.algo, impl_->workspace, impl_->workspace_bytes,
                                 as_stream(stream)));
}

}  // namespace lt::cuda
