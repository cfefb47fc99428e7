#include "kernels/cuda/attention_cuda.h"

#include <stdexcept>
#include <string>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_check.cuh"

namespace lt::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kPerLane = static_cast<int>(kAttentionMaxHeadDimCuda / 32);

struct Shape {
  int64_t B, S, Hq, Hkv, D;
  float scale;
  const int32_t* doc_start;
  int64_t window;
  __host__ __device__ int64_t group() const { return Hq / Hkv; }
};

__device__ inline int64_t first_key(const Shape& s, int64_t b, int64_t i) {
  int64_t j0 = s.doc_start ? s.doc_start[b * s.S + i] : 0;
  if (s.window > 0 && i - s.window + 1 > j0) j0 = i - s.window + 1;
  return j0;
}

// The last query that sees key j (the rows of a run of documents: queries past j see it
// while they stay in j's document and within the window).
__device__ inline int64_t last_query(const Shape& s, int64_t b, int64_t j) {
  int64_t last = s.S - 1;
  if (s.window > 0 && j + s.window - 1 < last) last = j + s.window - 1;
  if (s.doc_start) {
    int64_t i = j + 1;
    while (i <= last && s.doc_start[b * s.S + i] <= j) ++i;
    last = i - 1;
  }
  return last;
}

// A row of D floats spread over a warp: lane l holds elements l, l + 32, ...
struct LaneRow {
  float v[kPerLane];
};
__device__ inline LaneRow load_row(const float* p, int64_t D) {
  LaneRow r;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    r.v[e] = d < D ? p[d] : 0.f;
  }
  return r;
}
__device__ inline float dot(const LaneRow& a, const float* p, int64_t D) {
  const int lane = threadIdx.x & 31;
  float s = 0.f;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    if (d < D) s = fmaf(a.v[e], p[d], s);
  }
  return warp_sum(s);
}
__device__ inline void axpy(LaneRow& acc, float a, const float* p, int64_t D) {  // acc += a * p
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    if (d < D) acc.v[e] = fmaf(a, p[d], acc.v[e]);
  }
}
__device__ inline void store_row(float* p, const LaneRow& r, float scale, int64_t D) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    if (d < D) p[d] = r.v[e] * scale;
  }
}

// Warp w of the grid takes row w of [B, Hq or Hkv, S] (row = (b * H + h) * S + i).
__device__ inline int64_t warp_row() {
  return static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
}

__global__ void forward_kernel(float* o, float* lse, const float* q, const float* k, const float* v, Shape s) {
  const int64_t row = warp_row();
  if (row >= s.B * s.Hq * s.S) return;
  const int64_t i = row % s.S, h = (row / s.S) % s.Hq, b = row / (s.S * s.Hq), hk = h / s.group();
  const int64_t qoff = ((b * s.S + i) * s.Hq + h) * s.D;
  const LaneRow qi = load_row(q + qoff, s.D);
  LaneRow acc{};
  float mx = -INFINITY, sum = 0.f;
  for (int64_t j = first_key(s, b, i); j <= i; ++j) {
    const int64_t koff = ((b * s.S + j) * s.Hkv + hk) * s.D;
    const float sc = dot(qi, k + koff, s.D) * s.scale;
    const float new_mx = fmaxf(mx, sc);
    const float rescale = expf(mx - new_mx), p = expf(sc - new_mx);
    sum = sum * rescale + p;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) acc.v[e] *= rescale;
    axpy(acc, p, v + koff, s.D);
    mx = new_mx;
  }
  store_row(o + qoff, acc, 1.0f / sum, s.D);
  if ((threadIdx.x & 31) == 0) lse[row] = mx + logf(sum);
}

// dq for one query row: sum over its keys in order of ds * k, times the scale.
__global__ void dq_kernel(float* dq, const float* dout, const float* q, const float* k, const float* v,
                          const float* o, const float* lse, Shape s) {
  const int64_t row = warp_row();
  if (row >= s.B * s.Hq * s.S) return;
  const int64_t i = row % s.S, h = (row / s.S) % s.Hq, b = row / (s.S * s.Hq), hk = h / s.group();
  const int64_t qoff = ((b * s.S + i) * s.Hq + h) * s.D;
  const LaneRow qi = load_row(q + qoff, s.D), doi = load_row(dout + qoff, s.D);
  const float delta = dot(doi, o + qoff, s.D), l = lse[row];
  LaneRow acc{};
  for (int64_t j = first_key(s, b, i); j <= i; ++j) {
    const int64_t koff = ((b * s.S + j) * s.Hkv + hk) * s.D;
    const float p = expf(dot(qi, k + koff, s.D) * s.scale - l);
    const float ds = p * (dot(doi, v + koff, s.D) - delta);
    axpy(acc, ds, k + koff, s.D);
  }
  store_row(dq + qoff, acc, s.scale, s.D);
}

// dk and dv for one key row of kv head hk: the group's query heads in order, each over the
// queries that see the key in order.
__global__ void dkv_kernel(float* dk, float* dv, const float* dout, const float* q, const float* k,
                           const float* v, const float* o, const float* lse, Shape s) {
  const int64_t row = warp_row();
  if (row >= s.B * s.Hkv * s.S) return;
  const int64_t j = row % s.S, hk = (row / s.S) % s.Hkv, b = row / (s.S * s.Hkv);
  const int64_t koff = ((b * s.S + j) * s.Hkv + hk) * s.D;
  const LaneRow kj = load_row(k + koff, s.D), vj = load_row(v + koff, s.D);
  LaneRow dk_acc{}, dv_acc{};
  const int64_t last = last_query(s, b, j);
  for (int64_t h = hk * s.group(); h < (hk + 1) * s.group(); ++h)
    for (int64_t i = j; i <= last; ++i) {
      const int64_t qoff = ((b * s.S + i) * s.Hq + h) * s.D;
      const float l = lse[(b * s.Hq + h) * s.S + i];
      const float p = expf(dot(kj, q + qoff, s.D) * s.scale - l);
      const float delta = dot(load_row(dout + qoff, s.D), o + qoff, s.D);
      const float ds = p * (dot(vj, dout + qoff, s.D) - delta);
      axpy(dv_acc, p, dout + qoff, s.D);
      axpy(dk_acc, ds, q + qoff, s.D);
    }
  store_row(dk + koff, dk_acc, s.scale, s.D);
  store_row(dv + koff, dv_acc, 1.0f, s.D);
}

Shape make_shape(int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, float scale, const int32_t* doc_start,
                 int64_t window) {
  if (D < 1 || D > kAttentionMaxHeadDimCuda)
    throw std::runtime_error("attention (cuda): head dim " + std::to_string(D) + " outside [1, " +
                             std::to_string(kAttentionMaxHeadDimCuda) + "]");
  if (Hkv < 1 || Hq % Hkv != 0)
    throw std::runtime_error("attention (cuda): " + std::to_string(Hq) + " query heads are not a multiple of " +
                             std::to_string(Hkv) + " kv heads");
  return Shape{B, S, Hq, Hkv, D, scale, doc_start, window};
}

unsigned blocks_for_rows(int64_t rows) {
  return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

void attention_forward(float* o, float* lse, const float* q, const float* k, const float* v, int64_t B, int64_t S,
                       int64_t Hq, int64_t Hkv, int64_t D, float scale, const int32_t* doc_start, int64_t window,
                       void* stream) {
  const Shape s = make_shape(B, S, Hq, Hkv, D, scale, doc_start, window);
  const int64_t rows = B * Hq * S;
  if (rows == 0) return;
  forward_kernel<<<blocks_for_rows(rows), 32 * kWarpsPerBlock, 0, as_stream(stream)>>>(o, lse, q, k, v, s);
  LT_CUDA_CHECK_LAUNCH(forward_kernel);
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* o, const float* lse, int64_t B, int64_t S, int64_t Hq,
                        int64_t Hkv, int64_t D, float scale, const int32_t* doc_start, int64_t window, void* stream) {
  const Shape s = make_shape(B, S, Hq, Hkv, D, scale, doc_start, window);
  if (B * S == 0) return;
  const cudaStream_t st = as_stream(stream);
  dq_kernel<<<blocks_for_rows(B * Hq * S), 32 * kWarpsPerBlock, 0, st>>>(dq, dout, q, k, v, o, lse, s);
  LT_CUDA_CHECK_LAUNCH(dq_kernel);
  dkv_kernel<<<blocks_for_rows(B * Hkv * S), 32 * kWarpsPerBlock, 0, st>>>(dk, dv, dout, q, k, v, o, lse, s);
  LT_CUDA_CHECK_LAUNCH(dkv_kernel);
}

}  // namespace lt::cuda
