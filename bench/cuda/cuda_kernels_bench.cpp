// The CUDA kernels' speed at the shapes of one 8B-class layer (4096 tokens), forward and
// backward, each the median of ROUNDS timed calls (CUDA events around the call on one
// stream, after warm-up calls). A program, not a test; bench/cuda/cuda_kernels_bench.py
// runs it beside PyTorch's kernels at the same shapes and prints the ratios.
//
// usage: cuda_kernels_bench [ROUNDS]    prints one line:
//   OURS gemm_ms=... gemm_tflops=... attn_fwd_ms=... attn_fwd_bf16_ms=... attn_bwd_ms=... attn_bwd_bf16_ms=...
//        rms_fwd_ms=... ...
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/attention_tc_cuda.h"
#include "kernels/cuda/causal_conv1d_cuda.h"
#include "kernels/cuda/convert_cuda.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/gated_delta_rule_cuda.h"
#include "kernels/cuda/matmul_cuda.h"
#include "kernels/cuda/rmsnorm_cuda.h"

namespace {

using lt::cuda::DeviceBuffer;

int rounds = 10;

// The median time of f in ms over `rounds` calls, after two warm-up calls.
double median_ms(const std::function<void()>& f) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 2; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < rounds; ++i) {
    cudaEventRecord(a);
    f();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

DeviceBuffer random_floats(size_t n, uint64_t seed, float lo = -1, float hi = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return lt::cuda::to_device(v);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) rounds = std::max(1, std::atoi(argv[1]));
  if (lt::cuda::device_count() == 0) {
    std::printf("no CUDA device: %s\n", lt::cuda::device_description().c_str());
    return 1;
  }
  std::string line = "OURS";
  auto put = [&](const char* key, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " %s=%.3f", key, v);
    line += buf;
  };

  // A linear layer's forward product, bf16 inputs, fp32 output: [4096, 4096] x [14336, 4096]^T.
  {
    const int64_t M = 4096, K = 4096, N = 14336;
    // Random operands: constant ones run measurably faster on the same GPU (less switching).
    DeviceBuffer a(M * K * 2), b(N * K * 2), c(M * N * 4);
    {
      DeviceBuffer af = random_floats(M * K, 21), bf = random_floats(N * K, 22);
      lt::cuda::convert_f32_to_bf16(a.as<uint16_t>(), af.as<float>(), M * K);
      lt::cuda::convert_f32_to_bf16(b.as<uint16_t>(), bf.as<float>(), N * K);
      lt::cuda::device_synchronize();
    }
    lt::cuda::Gemm gemm;
    lt::cuda::GemmArgs g;
    g.a = a.data(), g.b = b.data(), g.c = c.as<float>(), g.m = M, g.n = N, g.k = K, g.trans_b = true;
    const double ms = median_ms([&] { gemm.run(g); });
    put("gemm_ms", ms);
    put("gemm_tflops", 2.0 * M * N * K / (ms * 1e-3) / 1e12);
  }

  // Causal grouped-query attention, fp32: B 1, S 4096, 32 query heads over 8, D 128.
  {
    const int64_t B = 1, S = 4096, Hq = 32, Hkv = 8, D = 128;
    const float scale = 1.0f / std::sqrt(128.0f);
    DeviceBuffer q = random_floats(B * S * Hq * D, 1), k = random_floats(B * S * Hkv * D, 2),
                 v = random_floats(B * S * Hkv * D, 3), dout = random_floats(B * S * Hq * D, 4);
    DeviceBuffer o(B * S * Hq * D * 4), lse(B * Hq * S * 4), dq(B * S * Hq * D * 4), dk(B * S * Hkv * D * 4),
        dv(B * S * Hkv * D * 4), fws(lt::cuda::attention_forward_bf16_workspace_bytes(B, S, Hq, Hkv, D)),
        ws(lt::cuda::attention_backward_bf16_workspace_bytes(B, S, Hq, Hkv, D));
    put("attn_fwd_ms", median_ms([&] {
          lt::cuda::attention_forward(o.as<float>(), lse.as<float>(), q.as<float>(), k.as<float>(), v.as<float>(), B,
                                      S, Hq, Hkv, D, scale);
        }));
    put("attn_fwd_bf16_ms", median_ms([&] {  // the tensor-core kernel, bf16 operands
          lt::cuda::attention_forward_bf16(o.as<float>(), lse.as<float>(), q.as<float>(), k.as<float>(),
                                           v.as<float>(), fws.data(), B, S, Hq, Hkv, D, scale);
        }));
    put("attn_bwd_ms", median_ms([&] {
          lt::cuda::attention_backward(dq.as<float>(), dk.as<float>(), dv.as<float>(), dout.as<float>(),
                                       q.as<float>(), k.as<float>(), v.as<float>(), o.as<float>(), lse.as<float>(),
                                       B, S, Hq, Hkv, D, scale);
        }));
    put("attn_bwd_bf16_ms", median_ms([&] {
          lt::cuda::attention_backward_bf16(dq.as<float>(), dk.as<float>(), dv.as<float>(), dout.as<float>(),
                                            q.as<float>(), k.as<float>(), v.as<float>(), o.as<float>(),
                                            lse.as<float>(), ws.data(), B, S, Hq, Hkv, D, scale);
        }));
  }

  // RMSNorm over the hidden size, fp32: T 4096, C 4096.
  {
    const int64_t T = 4096, C = 4096;
    DeviceBuffer x = random_floats(T * C, 5), w = random_floats(C, 6), dy = random_floats(T * C, 7);
    DeviceBuffer y(T * C * 4), rstd(T * 4), dx(T * C * 4), dw(C * 4), ws(lt::cuda::rmsnorm_backward_workspace_bytes(T, C));
    put("rms_fwd_ms", median_ms([&] {
          lt::cuda::rmsnorm_forward(y.as<float>(), rstd.as<float>(), x.as<float>(), w.as<float>(), T, C, 1e-6f, 0.0f);
        }));
    put("rms_bwd_ms", median_ms([&] {
          lt::cuda::rmsnorm_backward(dx.as<float>(), dw.as<float>(), dy.as<float>(), x.as<float>(), w.as<float>(),
                                     rstd.as<float>(), T, C, 0.0f, ws.data());
        }));
  }

  // Qwen3.5's Gated DeltaNet at 4096 tokens, fp32: 16 key heads, 32 value heads, dims 128,
  // chunk 64; its short conv over q | k | v (8192 channels, 4 taps).
  {
    const lt::GatedDeltaShape s{1, 4096, 16, 32, 128, 128, 64};
    const int64_t nqk = s.seq * s.k_heads * s.k_dim, nv = s.seq * s.v_heads * s.v_dim, ng = s.seq * s.v_heads;
    DeviceBuffer q = random_floats(nqk, 8), k = random_floats(nqk, 9), v = random_floats(nv, 10),
                 g = random_floats(ng, 11, -1.0f, 0.0f), beta = random_floats(ng, 12, 0.0f, 1.0f),
                 dout = random_floats(nv, 13);
    DeviceBuffer out(nv * 4), chunks(s.chunk_state_floats() * 4), dq(nqk * 4), dk(nqk * 4), dv(nv * 4), dg(ng * 4),
        dbeta(ng * 4), fws(lt::cuda::gated_delta_rule_forward_workspace_bytes(s)),
        bws(lt::cuda::gated_delta_rule_backward_workspace_bytes(s));
    put("gdr_fwd_ms", median_ms([&] {
          lt::cuda::gated_delta_rule_forward(out.as<float>(), nullptr, chunks.as<float>(), q.as<float>(),
                                             k.as<float>(), v.as<float>(), g.as<float>(), beta.as<float>(), nullptr,
                                             s, fws.data());
        }));
    put("gdr_bwd_ms", median_ms([&] {
          lt::cuda::gated_delta_rule_backward(dq.as<float>(), dk.as<float>(), dv.as<float>(), dg.as<float>(),
                                              dbeta.as<float>(), nullptr, dout.as<float>(), nullptr, q.as<float>(),
                                              k.as<float>(), v.as<float>(), g.as<float>(), beta.as<float>(),
                                              chunks.as<float>(), s, bws.data());
        }));
    const int64_t C = 2 * s.k_heads * s.k_dim + s.v_heads * s.v_dim, Kc = 4;
    DeviceBuffer x = random_floats(s.seq * C, 14), w = random_floats(C * Kc, 15), dy = random_floats(s.seq * C, 16);
    DeviceBuffer y(s.seq * C * 4), dx(s.seq * C * 4), dw(C * Kc * 4),
        cws(lt::cuda::causal_conv1d_backward_workspace_bytes(1, s.seq, C, Kc));
    put("conv_fwd_ms", median_ms([&] {
          lt::cuda::causal_conv1d_silu_forward(y.as<float>(), x.as<float>(), w.as<float>(), 1, s.seq, C, Kc);
        }));
    put("conv_bwd_ms", median_ms([&] {
          lt::cuda::causal_conv1d_silu_backward(dx.as<float>(), dw.as<float>(), dy.as<float>(), x.as<float>(),
                                                w.as<float>(), 1, s.seq, C, Kc, cws.data());
        }));
  }
  std::printf("%s\n", line.c_str());
  return 0;
}
