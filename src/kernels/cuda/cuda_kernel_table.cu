#include "kernels/cuda/cuda_kernel_table.h"

#include <atomic>

#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/attention_tc_cuda.h"
#include "kernels/cuda/causal_conv1d_cuda.h"
#include "kernels/cuda/convert_cuda.h"
#include "kernels/cuda/delta_rule_gates_cuda.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/elementwise_cuda.h"
#include "kernels/cuda/embedding_cuda.h"
#include "kernels/cuda/gated_delta_rule_cuda.h"
#include "kernels/cuda/gated_rmsnorm_cuda.h"
#include "kernels/cuda/geglu_cuda.h"
#include "kernels/cuda/head_cross_entropy_table.h"
#include "kernels/cuda/linear_cuda.h"
#include "kernels/cuda/rmsnorm_cuda.h"
#include "kernels/cuda/rope_cuda.h"
#include "kernels/cuda/sum_of_squares_cuda.h"
#include "kernels/cuda/swiglu_cuda.h"

namespace lt::cuda {
namespace {

std::atomic<void*> g_stream{nullptr};
void* stream() { return g_stream.load(std::memory_order_relaxed); }

// Scratch for one kernel call, from the stream-ordered pool: taken and given back on the
// table's stream, so it is free for reuse only after the kernel that used it.
// (The stream is the one of the taking: the table's may change before the giving back.)
class Scratch {
 public:
  explicit Scratch(size_t bytes) : stream_(as_stream(stream())) {
    if (bytes) LT_CUDA_CHECK(cudaMallocAsync(&p_, bytes, stream_));
  }
  ~Scratch() {
    if (p_) cudaFreeAsync(p_, stream_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return p_; }

 private:
  cudaStream_t stream_;
  void* p_ = nullptr;
};

// The head's logit budget: 512 MiB. At 32768 tokens (32 x 1024) and bf16, 2048-row
// sub-chunks (the 32 MiB CPU default would give 128-row ones, products too narrow for the
// tensor cores); the plan counts it with the head's scratch.
CrossEntropyOptions head_options() {
  CrossEntropyOptions o;
  o.max_logit_bytes = int64_t{512} << 20;
  return o;
}

size_t floats_for(size_t bytes) { return (bytes + sizeof(float) - 1) / sizeof(float); }

GemmInput gemm_input(Precision p) { return p == Precision::BF16 ? GemmInput::BF16 : GemmInput::F32; }
const uint16_t* bits(const bf16* p) {
  static_assert(sizeof(bf16) == sizeof(uint16_t), "bf16 is its 16 bits");
  return reinterpret_cast<const uint16_t*>(p);
}

// The table's products share one cuBLASLt handle and workspace, made at the first product
// (which is when cuBLASLt is loaded: cublaslt_api.cuh). They run on the table's stream only,
// so the one workspace is never in use twice at once.
Gemm& table_gemm() {
  static Gemm gemm;
  return gemm;
}

// What the entries without a workspace argument take from the pool per call (the table
// hands these out, so that a plan counts what the calls below take). Made once: every
// linear layer's call sizes its scratch here.
KernelTable::PoolScratch make_pool_scratch() {
  KernelTable::PoolScratch s;
  s.linear_forward = [](int64_t M, int64_t K, int64_t N, Precision p, bool has_w_bf16) {
    return linear_forward_workspace_bytes(M, K, N, gemm_input(p), has_w_bf16);
  };
  s.linear_backward = [](int64_t M, int64_t K, int64_t N, Precision p, bool has_w_bf16, bool has_dbias) {
    return linear_backward_workspace_bytes(M, K, N, gemm_input(p), has_w_bf16, has_dbias);
  };
  s.attention_forward = [](int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, Precision p) {
    return p == Precision::BF16 ? attention_forward_bf16_workspace_bytes(B, S, Hq, Hkv, D) : size_t{0};
  };
  s.attention_backward = [](int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, Precision p) {
    return p == Precision::BF16 ? attention_backward_bf16_workspace_bytes(B, S, Hq, Hkv, D) : size_t{0};
  };
  s.rmsnorm_backward = &rmsnorm_backward_workspace_bytes;
  s.causal_conv1d_silu_backward = [](const CausalConvShape& c) {
    return causal_conv1d_backward_workspace_bytes(c.batch, c.seq, c.channels, c.kernel);
  };
  return s;
}

const KernelTable::PoolScratch& pool_scratch() {
  static const KernelTable::PoolScratch s = make_pool_scratch();
  return s;
}

KernelTable make_table() {
  KernelTable k;
  k.name = "cuda";
  k.pool_scratch = pool_scratch();
  k.embedding_forward = [](float* out, const int32_t* tokens, const float* table, int64_t T, int64_t V, int64_t C) {
    embedding_forward(out, tokens, table, T, V, C, stream());
  };
  k.embedding_backward = [](float* dtable, const int32_t* tokens, const float* dout, int64_t T, int64_t V,
                            int64_t C) {
    Scratch ws(embedding_backward_workspace_bytes(T));
    embedding_backward(dtable, tokens, dout, T, V, C, ws.get(), stream());
  };
  k.rmsnorm_forward = [](float* y, float* rstd, const float* x, const float* w, int64_t T, int64_t C, float eps,
                         float w_offset) { rmsnorm_forward(y, rstd, x, w, T, C, eps, w_offset, stream()); };
  k.rmsnorm_backward = [](float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd,
                          int64_t T, int64_t C, float w_offset) {
    Scratch ws(pool_scratch().rmsnorm_backward(T, C));
    rmsnorm_backward(dx, dw, dy, x, w, rstd, T, C, w_offset, ws.get(), stream());
  };
  k.gated_rmsnorm_forward = [](float* y, float* rstd, const float* x, const float* z, const float* w, int64_t T,
                               int64_t D, float eps) { gated_rmsnorm_forward(y, rstd, x, z, w, T, D, eps, stream()); };
  k.gated_rmsnorm_backward_workspace_floats = [](int64_t T, int64_t D) {
    return floats_for(gated_rmsnorm_backward_workspace_bytes(T, D));
  };
  k.gated_rmsnorm_backward = [](float* dx, float* dz, float* dw, const float* dy, const float* x, const float* z,
                                const float* w, const float* rstd, int64_t T, int64_t D, float* workspace) {
    gated_rmsnorm_backward(dx, dz, dw, dy, x, z, w, rstd, T, D, workspace, stream());
  };
  k.rope_forward = [](float* x, const float* cos, const float* sin, int64_t B, int64_t S, int64_t H, int64_t D,
                      const int32_t* positions, int64_t rotary) {
    rope_forward(x, cos, sin, B, S, H, D, positions, rotary, stream());
  };
  k.rope_backward = [](float* dx, const float* cos, const float* sin, int64_t B, int64_t S, int64_t H, int64_t D,
                       const int32_t* positions, int64_t rotary) {
    rope_backward(dx, cos, sin, B, S, H, D, positions, rotary, stream());
  };
  // Under bf16 the tensor-core kernels (bf16 operands, as flash attention under bf16
  // training); under fp32 the fp32 kernel.
  k.attention_forward = [](float* o, float* lse, const float* q, const float* kk, const float* v, int64_t B,
                           int64_t S, int64_t Hq, int64_t Hkv, int64_t D, float scale, const int32_t* doc_start,
                           int64_t window, Precision p) {
    if (p == Precision::BF16) {
      Scratch ws(attention_forward_bf16_workspace_bytes(B, S, Hq, Hkv, D));
      attention_forward_bf16(o, lse, q, kk, v, ws.get(), B, S, Hq, Hkv, D, scale, doc_start, window, stream());
    } else
      attention_forward(o, lse, q, kk, v, B, S, Hq, Hkv, D, scale, doc_start, window, stream());
  };
  k.attention_backward = [](float* dq, float* dk, float* dv, const float* dout, const float* q, const float* kk,
                            const float* v, const float* o, const float* lse, int64_t B, int64_t S, int64_t Hq,
                            int64_t Hkv, int64_t D, float scale, const int32_t* doc_start, int64_t window,
                            Precision p) {
    if (p == Precision::BF16) {
      Scratch ws(attention_backward_bf16_workspace_bytes(B, S, Hq, Hkv, D));
      attention_backward_bf16(dq, dk, dv, dout, q, kk, v, o, lse, ws.get(), B, S, Hq, Hkv, D, scale, doc_start, window,
                              stream());
    } else
      attention_backward(dq, dk, dv, dout, q, kk, v, o, lse, B, S, Hq, Hkv, D, scale, doc_start, window, stream());
  };
  k.swiglu_forward = [](float* h, const float* g, const float* u, int64_t n) { swiglu_forward(h, g, u, n, stream()); };
  k.swiglu_backward = [](float* dg, float* du, const float* dh, const float* g, const float* u, int64_t n) {
    swiglu_backward(dg, du, dh, g, u, n, stream());
  };
  k.geglu_forward = [](float* h, const float* g, const float* u, int64_t n) { geglu_forward(h, g, u, n, stream()); };
  k.geglu_backward = [](float* dg, float* du, const float* dh, const float* g, const float* u, int64_t n) {
    geglu_backward(dg, du, dh, g, u, n, stream());
  };
  k.linear_forward = [](float* y, LinearInput x, const float* w, const bf16* w_bf16, const float* bias, int64_t M,
                       int64_t K, int64_t N, Precision p) {
    Scratch ws(pool_scratch().linear_forward(M, K, N, p, w_bf16 != nullptr));
    linear_forward(table_gemm(), y, x.data, w, bits(w_bf16), bias, M, K, N, gemm_input(p), ws.get(), stream());
  };
  k.linear_backward = [](float* dx, float* dw, float* dbias, const float* dy, LinearInput x, const float* w,
                         const bf16* w_bf16, int64_t M, int64_t K, int64_t N, bool accumulate_dx, Precision p) {
    Scratch ws(pool_scratch().linear_backward(M, K, N, p, w_bf16 != nullptr, dbias != nullptr));
    linear_backward(table_gemm(), dx, dw, dbias, dy, x.data, w, bits(w_bf16), M, K, N, accumulate_dx,
                    gemm_input(p), ws.get(), stream());
  };
  // The device GEMMs convert their inputs in their own pass (linear_cuda.cu): nothing to
  // round ahead.
  k.round_gemm_input = [](float*, int64_t, Precision) { return false; };
  k.gemm_inputs_rounded = [](Precision) { return false; };
  k.matmul = [](float* c, const float* a, bool trans_a, const float* b, bool trans_b, int64_t M, int64_t N, int64_t K,
                bool accumulate, Precision p) {
    Scratch ws(matmul_workspace_bytes(M, N, K, gemm_input(p)));
    matmul(table_gemm(), c, a, trans_a, b, trans_b, M, N, K, accumulate, gemm_input(p), ws.get(), stream());
  };
  k.causal_conv1d_silu_forward = [](float* y, const float* x, const float* w, const CausalConvShape& s) {
    causal_conv1d_silu_forward(y, x, w, s.batch, s.seq, s.channels, s.kernel, stream());
  };
  k.causal_conv1d_silu_backward = [](float* dx, float* dw, const float* dy, const float* x, const float* w,
                                     const CausalConvShape& s) {
    Scratch ws(pool_scratch().causal_conv1d_silu_backward(s));
    causal_conv1d_silu_backward(dx, dw, dy, x, w, s.batch, s.seq, s.channels, s.kernel, ws.get(), stream());
  };
  k.delta_rule_gates_forward = [](float* beta, float* decay, const float* b, const float* a, const float* A_log,
                                  const float* dt_bias, int64_t T, int64_t H) {
    delta_rule_gates_forward(beta, decay, b, a, A_log, dt_bias, T, H, stream());
  };
  k.delta_rule_gates_backward = [](float* db, float* da, float* d_dt_bias, float* d_A_log, const float* dbeta,
                                   const float* dg, const float* a, const float* beta, const float* decay,
                                   const float* A_log, const float* dt_bias, int64_t T, int64_t H) {
    delta_rule_gates_backward(db, da, d_dt_bias, d_A_log, dbeta, dg, a, beta, decay, A_log, dt_bias, T, H, stream());
  };
  k.gated_delta_rule_forward_workspace_floats = [](const GatedDeltaShape& s) {
    return floats_for(gated_delta_rule_forward_workspace_bytes(s));
  };
  k.gated_delta_rule_backward_workspace_floats = [](const GatedDeltaShape& s) {
    return floats_for(gated_delta_rule_backward_workspace_bytes(s));
  };
  k.gated_delta_rule_forward = [](float* out, float* final_state, float* chunk_states, const float* q, const float* kk,
                                  const float* v, const float* g, const float* beta, const float* initial_state,
                                  const GatedDeltaShape& s, float* workspace) {
    gated_delta_rule_forward(out, final_state, chunk_states, q, kk, v, g, beta, initial_state, s, workspace, stream());
  };
  k.gated_delta_rule_backward = [](float* dq, float* dk, float* dv, float* dg, float* dbeta, float* d_initial_state,
                                   const float* d_out, const float* d_final_state, const float* q, const float* kk,
                                   const float* v, const float* g, const float* beta, const float* chunk_states,
                                   const GatedDeltaShape& s, float* workspace) {
    gated_delta_rule_backward(dq, dk, dv, dg, dbeta, d_initial_state, d_out, d_final_state, q, kk, v, g, beta,
                              chunk_states, s, workspace, stream());
  };
  k.add_inplace = [](float* y, const float* x, int64_t n) { add_inplace(y, x, n, stream()); };
  k.add_into = [](float* y, const float* a, const float* b, int64_t n) { add_into(y, a, b, n, stream()); };
  k.scale_inplace = [](float* x, float s, int64_t n) { scale_inplace(x, s, n, stream()); };
  k.zero_rows_with_id = [](float* x, const int32_t* ids, int64_t T, int64_t C, int32_t id) {
    zero_rows_with_id(x, ids, T, C, id, stream());
  };
  k.copy_rows = [](float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows, int64_t cols) {
    copy_rows(dst, dst_stride, src, src_stride, rows, cols, stream());
  };
  k.sigmoid_gate_forward = [](float* y, const float* x, const float* gate, int64_t n) {
    sigmoid_gate_forward(y, x, gate, n, stream());
  };
  k.sigmoid_gate_backward = [](float* dx, float* dgate, const float* dy, const float* x, const float* gate,
                               int64_t n) { sigmoid_gate_backward(dx, dgate, dy, x, gate, n, stream()); };
  // The head (head_cross_entropy_table.h): its loss comes back to the host.
  k.head_cross_entropy_workspace_bytes = &table_head_workspace_bytes;
  k.head_cross_entropy = [](float* dx, float* dw, const float* x, const float* w, const bf16* w_bf16,
                            const int32_t* targets, int64_t T, int64_t C, int64_t V, float grad_scale, Precision p,
                            const CrossEntropyOptions& opt, void* workspace) {
    return table_head_cross_entropy(table_gemm(), dx, dw, x, w, w_bf16, targets, T, C, V, grad_scale, p, opt,
                                    workspace, stream());
  };
  k.head_options = head_options();
  k.head_cross_entropy_vocab_chunk = [](int64_t T, int64_t V, Precision p) {
    return table_head_vocab_chunk(T, V, p, head_options());
  };
  k.head_cross_entropy_stream = [](const float* x, const int32_t* targets, int64_t T, int64_t C, int64_t V,
                                   float grad_scale, Precision p, const CrossEntropyOptions& opt, void* workspace) {
    return table_head_stream(table_gemm(), x, targets, T, C, V, grad_scale, p, opt, workspace, stream());
  };
  // The table's contract returns the sum to the host: the device double comes back and the
  // stream is waited for (the gradient sink sums on the host's copies; a device-side
  // accumulation for the whole step is sum_of_squares_f64's own += form).
  k.sum_of_squares = [](const float* x, int64_t n) -> double {
    const size_t partial_at = align_workspace(sizeof(double));
    Scratch ws(partial_at + sum_of_squares_workspace_bytes(n));
    auto* total = static_cast<double*>(ws.get());
    const cudaStream_t s = as_stream(stream());
    LT_CUDA_CHECK(cudaMemsetAsync(total, 0, sizeof(double), s));
    sum_of_squares_f64(total, x, n, static_cast<char*>(ws.get()) + partial_at, s);
    double host = 0;
    LT_CUDA_CHECK(cudaMemcpyAsync(&host, total, sizeof(double), cudaMemcpyDeviceToHost, s));
    LT_CUDA_CHECK(cudaStreamSynchronize(s));
    return host;
  };
  k.convert_f32_to_bf16 = [](bf16* dst, const float* src, size_t n) {
    convert_f32_to_bf16(reinterpret_cast<uint16_t*>(dst), src, static_cast<int64_t>(n), stream());
  };
  return k;
}

}  // namespace

void set_kernel_table_stream(void* s) { g_stream.store(s, std::memory_order_relaxed); }
void release_kernel_table_stream(void* s) { g_stream.compare_exchange_strong(s, nullptr, std::memory_order_relaxed); }

const KernelTable& kernel_table() {
  static const KernelTable table = make_table();
  return table;
}

}  // namespace lt::cuda
