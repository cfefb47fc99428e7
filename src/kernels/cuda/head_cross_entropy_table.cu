#include "kernels/cuda/head_cross_entropy_table.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda/convert_cuda.h"
#include "kernels/cuda/cross_entropy_cuda.h"
#include "kernels/cuda/cuda_check.cuh"

namespace lt::cuda {
namespace {

GemmInput input_of(Precision p) { return p == Precision::BF16 ? GemmInput::BF16 : GemmInput::F32; }

// The workspace, in order: the loss (one double), the passes' scratch, and under BF16 the
// rounded x [T, C] and one sub-chunk's rounded rows [vc, C].
struct HeadWorkspace {
  double* loss = nullptr;
  void* passes = nullptr;
  uint16_t* x_bf16 = nullptr;
  uint16_t* rows_bf16 = nullptr;
  size_t bytes = 0;
};

HeadWorkspace layout(void* base, int64_t T, int64_t C, int64_t V, int64_t vc, Precision p) {
  char* b = static_cast<char*>(base);
  HeadWorkspace w;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    void* ptr = b ? b + at : nullptr;
    at += align_workspace(bytes);
    return ptr;
  };
  w.loss = static_cast<double*>(take(sizeof(double)));
  w.passes = take(head_cross_entropy_workspace_bytes(T, V, vc, input_of(p)));
  if (p == Precision::BF16) {
    w.x_bf16 = static_cast<uint16_t*>(take(static_cast<size_t>(T * C) * sizeof(uint16_t)));
    w.rows_bf16 = static_cast<uint16_t*>(take(static_cast<size_t>(vc * C) * sizeof(uint16_t)));
  }
  w.bytes = at;
  return w;
}

const uint16_t* bits(const bf16* p) { return reinterpret_cast<const uint16_t*>(p); }

// The CPU's head takes its own scratch when given none; the GPU's cannot (its kernels would
// write at offsets from null, an illegal address that ends the CUDA context).
void* given(void* workspace) {
  if (!workspace)
    throw std::runtime_error("head_cross_entropy (cuda): no workspace given; pass one of "
                             "head_cross_entropy_workspace_bytes of device memory");
  return workspace;
}

// The GEMM input for the head rows [v0, v0 + n): fp32 rows, the bf16 copy's rows, or the
// fp32 rows rounded into the workspace (queued on the stream before the GEMM that reads them).
const void* rows_for(const HeadWorkspace& ws, Precision p, const float* w, const bf16* w_bf16, int64_t v0, int64_t n,
                     int64_t C, void* stream) {
  if (p != Precision::BF16) return w + v0 * C;
  if (w_bf16) return bits(w_bf16) + v0 * C;
  if (!w) throw std::runtime_error("head_cross_entropy (cuda): no head rows (fp32 or bf16) given");
  convert_f32_to_bf16(ws.rows_bf16, w + v0 * C, n * C, stream);
  return ws.rows_bf16;
}

const void* x_for(const HeadWorkspace& ws, Precision p, const float* x, int64_t T, int64_t C, void* stream) {
  if (p != Precision::BF16) return x;
  convert_f32_to_bf16(ws.x_bf16, x, T * C, stream);
  return ws.x_bf16;
}

double loss_to_host(const double* loss, void* stream) {
  double host = 0;
  const cudaStream_t s = as_stream(stream);
  LT_CUDA_CHECK(cudaMemcpyAsync(&host, loss, sizeof(double), cudaMemcpyDeviceToHost, s));
  LT_CUDA_CHECK(cudaStreamSynchronize(s));
  return host;
}

// The streamed head: pass 1 folds the row chunks in ascending order, once; pass 2 takes
// them again in ascending order. Chunks start at multiples of the sub-chunk, so their
// sub-chunks are the whole call's.
class CudaStreamedHead final : public HeadCrossEntropyStream {
 public:
  CudaStreamedHead(Gemm& gemm, const float* x, const int32_t* targets, int64_t T, int64_t C, int64_t V,
                   float grad_scale, Precision p, const CrossEntropyOptions& opt, void* workspace, void* stream)
      : C_(C), V_(V), p_(p), vc_(table_head_vocab_chunk(T, V, p, opt)), stream_(stream),
        ws_(layout(given(workspace), T, C, V, vc_, p)),
        passes_(gemm, x_for(ws_, p, x, T, C, stream), targets, T, C, V, input_of(p), grad_scale, vc_, ws_.passes,
                stream) {}

  void forward(const float* w_rows, const bf16* w_rows_bf16, int64_t v0, int64_t nv) override {
    check_chunk("forward", v0, nv, folded_);
    for (int64_t j = 0; j < nv; j += vc_) {
      const int64_t n = std::min(vc_, nv - j);
      passes_.fold(rows_for(ws_, p_, w_rows, w_rows_bf16, j, n, C_, stream_), v0 + j, n);
    }
    folded_ += nv;
  }

  double loss() override {
    finish();
    if (!loss_read_) loss_ = loss_to_host(ws_.loss, stream_), loss_read_ = true;
    return loss_;
  }

  void backward(float* dx, float* dw_rows, const float* w_rows, const bf16* w_rows_bf16, int64_t v0,
                int64_t nv) override {
    finish();
    check_chunk("backward", v0, nv, next_back_);
    for (int64_t j = 0; j < nv; j += vc_) {
      const int64_t n = std::min(vc_, nv - j);
      passes_.backward(rows_for(ws_, p_, w_rows, w_rows_bf16, j, n, C_, stream_), v0 + j, n, dx, dw_rows + j * C_);
    }
    next_back_ += nv;
  }

 private:
  void check_chunk(const char* pass, int64_t v0, int64_t nv, int64_t expected) const {
    if (v0 != expected || nv < 0 || v0 + nv > V_ || (v0 + nv < V_ && nv % vc_ != 0))
      throw std::runtime_error(std::string("head_cross_entropy stream (cuda): ") + pass + " got rows [" +
                               std::to_string(v0) + ", " + std::to_string(v0 + nv) + "), expected the chunk at " +
                               std::to_string(expected) + " (chunks in ascending order, multiples of " +
                               std::to_string(vc_) + " rows but the last)");
  }
  void finish() {
    if (finished_) return;
    if (folded_ != V_)
      throw std::runtime_error("head_cross_entropy stream (cuda): the loss or backward before every row was folded (" +
                               std::to_string(folded_) + " of " + std::to_string(V_) + ")");
    passes_.finish(ws_.loss);
    finished_ = true;
  }

  int64_t C_, V_;
  Precision p_;
  int64_t vc_;
  void* stream_;
  HeadWorkspace ws_;
  HeadCrossEntropyPasses passes_;
  int64_t folded_ = 0, next_back_ = 0;
  bool finished_ = false, loss_read_ = false;
  double loss_ = 0;
};

}  // namespace

int64_t table_head_vocab_chunk(int64_t T, int64_t V, Precision p, const CrossEntropyOptions& opt) {
  if (opt.vocab_chunk < 1) throw std::runtime_error("head_cross_entropy (cuda): vocab_chunk must be >= 1");
  const int64_t per_logit = p == Precision::BF16 ? 6 : 4;
  int64_t vc = std::max<int64_t>(1, std::min(V, opt.vocab_chunk));
  while (vc > 1 && T * vc * per_logit > opt.max_logit_bytes) vc = (vc + 1) / 2;
  return vc;
}

size_t table_head_workspace_bytes(int64_t T, int64_t C, int64_t V, Precision p, bool /*streamed*/,
                                  const CrossEntropyOptions& opt) {
  return layout(nullptr, T, C, V, table_head_vocab_chunk(T, V, p, opt), p).bytes;
}

double table_head_cross_entropy(Gemm& gemm, float* dx, float* dw, const float* x, const float* w, const bf16* w_bf16,
                                const int32_t* targets, int64_t T, int64_t C, int64_t V, float grad_scale, Precision p,
                                const CrossEntropyOptions& opt, void* workspace, void* stream) {
  if ((dx == nullptr) != (dw == nullptr))
    throw std::runtime_error("head_cross_entropy (cuda): give dx and dw both, or neither");
  // The whole head is the stream's one chunk: the same sub-chunks, passes and loss read.
  CudaStreamedHead head(gemm, x, targets, T, C, V, grad_scale, p, opt, workspace, stream);
  head.forward(w, w_bf16, 0, V);
  if (dx) head.backward(dx, dw, w, w_bf16, 0, V);
  return head.loss();
}

std::unique_ptr<HeadCrossEntropyStream> table_head_stream(Gemm& gemm, const float* x, const int32_t* targets,
                                                          int64_t T, int64_t C, int64_t V, float grad_scale,
                                                          Precision p, const CrossEntropyOptions& opt,
                                                          void* workspace, void* stream) {
  return std::make_unique<CudaStreamedHead>(gemm, x, targets, T, C, V, grad_scale, p, opt, workspace, stream);
}

}  // namespace lt::cuda
