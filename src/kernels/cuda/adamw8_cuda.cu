// CUDA kernel of the fused 8-bit AdamW step; see adamw8_cuda.h for the contract.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/adamw8_cuda.h"
#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_check.cuh"

namespace lt::cuda {

namespace {

struct Maps {
  float m_value[256], m_tree[256], v_value[256], v_tree[256];
};
// Source of the per-block shared-memory copy (constant memory serializes divergent reads).
__constant__ Maps c_maps;

__device__ inline unsigned nearest_code(const float* tree, float x) {
  unsigned t = 1;
#pragma unroll
  for (int level = 0; level < 8; ++level) t = 2 * t + (x > tree[t] ? 1u : 0u);
  return t - 256;
}

__global__ void adamw8_kernel(AdamW8DeviceArgs a, AdamW8DeviceConsts c) {
  __shared__ Maps maps;
  __shared__ float scratch[32];
  for (int k = threadIdx.x; k < 256; k += blockDim.x) {
    maps.m_value[k] = c_maps.m_value[k];
    maps.m_tree[k] = c_maps.m_tree[k];
    maps.v_value[k] = c_maps.v_value[k];
    maps.v_tree[k] = c_maps.v_tree[k];
  }
  __syncthreads();
  const int64_t b = blockIdx.x;
  const int64_t i = b * a.block + threadIdx.x;
  const bool live = i < a.n;
  float m = 0.f, v = 0.f;
  bool bad = false;
  if (live) {
    float g = a.grad ? a.grad[i] : bf16_bits_to_f32(a.grad_bf16[i]);
    g = __fmul_rn(g, c.clip);
    const float m_old = __fmul_rn(maps.m_value[a.m_code[i]], a.m_absmax[b]);
    const float v_old = __fmul_rn(maps.v_value[a.v_code[i]], a.v_absmax[b]);
    m = __fmaf_rn(c.beta1, m_old, __fmul_rn(c.one_minus_beta1, g));
    v = __fmaf_rn(c.beta2, v_old, __fmul_rn(__fmul_rn(c.one_minus_beta2, g), g));
    bad = !(v < INFINITY);
  }
  if (__syncthreads_or(bad)) {  // leave the whole block unchanged
    if (threadIdx.x == 0) atomicAdd(a.skipped_blocks, 1);
    return;
  }
  const float am = block_max(live ? fabsf(m) : 0.f, scratch);
  const float av = block_max(live ? v : 0.f, scratch);
  if (!live) return;
  const float im = am > 0.f ? __fdiv_rn(1.0f, am) : 0.f, iv = av > 0.f ? __fdiv_rn(1.0f, av) : 0.f;
  const float denom = __fmaf_rn(__fsqrt_rn(v), c.inv_sqrt_bc2, c.eps);
  const float p = __fmaf_rn(-c.step_size, __fdiv_rn(m, denom), __fmul_rn(a.param[i], c.decay));
  a.param[i] = p;
  if (a.out_bf16) a.out_bf16[i] = f32_to_bf16_bits(p);
  a.m_code[i] = static_cast<uint8_t>(nearest_code(maps.m_tree, __fmul_rn(m, im)));
  a.v_code[i] = static_cast<uint8_t>(nearest_code(maps.v_tree, __fmul_rn(v, iv)));
  if (threadIdx.x == 0) {
    a.m_absmax[b] = am;
    a.v_absmax[b] = av;
  }
}

}  // namespace

void adamw8_step(const AdamW8DeviceArgs& a, const AdamW8DeviceConsts& c, const AdamW8DeviceMaps& maps, void* stream) {
  if (a.block % 32 != 0 || a.block < 32 || a.block > 1024)
    throw std::runtime_error("adamw8_step: block size must be a multiple of 32 in [32, 1024]");
  const cudaStream_t s = as_stream(stream);
  Maps h;
  for (int k = 0; k < 256; ++k) {
    h.m_value[k] = maps.m_value[k];
    h.m_tree[k] = maps.m_tree[k];
    h.v_value[k] = maps.v_value[k];
    h.v_tree[k] = maps.v_tree[k];
  }
  // Synchronous copy: h lives on this stack frame.
  LT_CUDA_CHECK(cudaMemcpyToSymbol(c_maps, &h, sizeof(Maps)));
  const int64_t blocks = (a.n + a.block - 1) / a.block;
  adamw8_kernel<<<static_cast<unsigned>(blocks), a.block, 0, s>>>(a, c);
  LT_CUDA_CHECK_LAUNCH(adamw8_kernel);
}

int adamw8_step_host(float* param, const float* grad, const uint16_t* grad_bf16, uint16_t* out_bf16,
                     uint8_t* m_code, uint8_t* v_code, float* m_absmax, float* v_absmax, int64_t n, int block,
                     const AdamW8DeviceConsts& c, const AdamW8DeviceMaps& maps) {
  const int64_t nb = (n + block - 1) / block;
  // Copies of the host arrays (the ones given: grad or grad_bf16, out_bf16 or none).
  auto copy_in = [](const void* h, size_t bytes) {
    DeviceBuffer d(h ? bytes : 0);
    if (h) d.upload(h, bytes);
    return d;
  };
  const size_t f = sizeof(float) * n, h16 = sizeof(uint16_t) * n;
  DeviceBuffer d_p = copy_in(param, f), d_g = copy_in(grad_bf16 ? nullptr : grad, f),
               d_g16 = copy_in(grad_bf16, h16), d_out(out_bf16 ? h16 : 0), d_mc = copy_in(m_code, n),
               d_vc = copy_in(v_code, n), d_am = copy_in(m_absmax, sizeof(float) * nb),
               d_av = copy_in(v_absmax, sizeof(float) * nb), d_skip(sizeof(int));
  d_skip.zero();
  AdamW8DeviceArgs a{d_p.as<float>(), d_g.as<float>(), d_g16.as<uint16_t>(), d_out.as<uint16_t>(),
                     d_mc.as<uint8_t>(), d_vc.as<uint8_t>(), d_am.as<float>(), d_av.as<float>(), d_skip.as<int>(), n,
                     block};
  adamw8_step(a, c, maps, nullptr);
  device_synchronize();
  int skipped = 0;
  d_p.download(param, f);
  if (out_bf16) d_out.download(out_bf16, h16);
  d_mc.download(m_code, n);
  d_vc.download(v_code, n);
  d_am.download(m_absmax, sizeof(float) * nb);
  d_av.download(v_absmax, sizeof(float) * nb);
  d_skip.download(&skipped, sizeof(int));
  return skipped;
}

}  // namespace lt::cuda
