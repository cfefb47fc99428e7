// The CUDA kernel table (kernels/cuda/cuda_kernel_table.h): each entry is the kernel it
// names, with the arguments in their places, on the table's stream. Each family runs
// twice on the same device inputs, once through the table (on a stream of its own) and
// once through the kernel's own function (on the default stream), and the outputs must be
// the same bits: the kernels' numbers are checked against float64 in their own tests, so
// what is left to check here is the wiring (argument order, the shape structs unpacked,
// workspace sizes, the stream), which any slip would change by far more than a bit.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "cuda_test_util.h"
#include "kernel_table_fixture.h"
#include "kernels/cuda/attention_cuda.h"
#include "kernels/cuda/attention_tc_cuda.h"
#include "kernels/cuda/causal_conv1d_cuda.h"
#include "kernels/cuda/convert_cuda.h"
#include "kernels/cuda/delta_rule_gates_cuda.h"
#include "kernels/cuda/cuda_kernel_table.h"
#include "kernels/cuda/elementwise_cuda.h"
#include "kernels/cuda/embedding_cuda.h"
#include "kernels/cuda/gated_delta_rule_cuda.h"
#include "kernels/cuda/gated_rmsnorm_cuda.h"
#include "kernels/cuda/geglu_cuda.h"
#include "kernels/cuda/linear_cuda.h"
#include "kernels/cuda/rmsnorm_cuda.h"
#include "kernels/cuda/rope_cuda.h"
#include "kernels/cuda/sum_of_squares_cuda.h"
#include "kernels/cuda/swiglu_cuda.h"

namespace lt {
namespace {

using cuda::DeviceBuffer;
using cuda::to_device;
using cuda::to_host;

class CudaKernelTable : public test::CudaTableTest {
 protected:
  static DeviceBuffer buf(size_t n, uint64_t seed) { return to_device(test::normal_floats(n, 1.0f, seed)); }
  static DeviceBuffer copy_of(const DeviceBuffer& b, size_t n) { return to_device(to_host<float>(b, n)); }
  // The same bits in n floats of a and b.
  static void expect_same(const DeviceBuffer& a, const DeviceBuffer& b, size_t n, const std::string& what) {
    const std::vector<float> x = to_host<float>(a, n), y = to_host<float>(b, n);
    size_t differ = 0;
    for (size_t i = 0; i < n; ++i) differ += test::bits_of(x[i]) != test::bits_of(y[i]);
    EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << n << " values differ";
  }
};

TEST_F(CudaKernelTable, HasTheEntriesItClaims) {
  EXPECT_STREQ(k().name, "cuda");
  EXPECT_TRUE(k().embedding_forward && k().embedding_backward && k().rmsnorm_forward && k().rmsnorm_backward &&
              k().gated_rmsnorm_forward && k().gated_rmsnorm_backward_workspace_floats && k().gated_rmsnorm_backward &&
              k().rope_forward && k().rope_backward && k().attention_forward && k().attention_backward &&
              k().swiglu_forward && k().swiglu_backward && k().geglu_forward && k().geglu_backward &&
              k().causal_conv1d_silu_forward && k().causal_conv1d_silu_backward &&
              k().gated_delta_rule_forward_workspace_floats && k().gated_delta_rule_backward_workspace_floats &&
              k().gated_delta_rule_forward && k().gated_delta_rule_backward && k().sum_of_squares &&
              k().convert_f32_to_bf16 && k().linear_forward && k().linear_backward && k().matmul &&
              k().add_inplace && k().add_into && k().scale_inplace && k().zero_rows_with_id && k().copy_rows &&
              k().sigmoid_gate_forward && k().sigmoid_gate_backward && k().delta_rule_gates_forward &&
              k().delta_rule_gates_backward && k().head_cross_entropy_workspace_bytes && k().head_cross_entropy &&
              k().head_cross_entropy_vocab_chunk && k().head_cross_entropy_stream);
}

TEST_F(CudaKernelTable, LinearAndMatmul) {
  // The table's products run on its own cuBLASLt handle; the direct calls on another with
  // the same workspace size, for which cuBLASLt picks the same algorithm.
  cuda::Gemm gemm;
  const int64_t M = 130, K = 96, N = 200;
  for (Precision p : {Precision::BF16, Precision::F32})
    for (bool with_bf16_copy : {false, true}) {
      if (p == Precision::F32 && with_bf16_copy) continue;
      const cuda::GemmInput in = p == Precision::BF16 ? cuda::GemmInput::BF16 : cuda::GemmInput::F32;
      const std::string what = std::string(p == Precision::BF16 ? "bf16" : "fp32") +
                               (with_bf16_copy ? " (bf16 copy)" : "") + " linear";
      DeviceBuffer x = buf(M * K, 21), w = buf(N * K, 22), bias = buf(N, 23), dy = buf(M * N, 24), w16(N * K * 2);
      cuda::convert_f32_to_bf16(w16.as<uint16_t>(), w.as<float>(), N * K);
      const uint16_t* w16_bits = with_bf16_copy ? w16.as<uint16_t>() : nullptr;
      DeviceBuffer y1(M * N * 4), y2(M * N * 4), dx1 = buf(M * K, 25), dx2 = copy_of(dx1, M * K);
      DeviceBuffer dw1 = buf(N * K, 26), dw2 = copy_of(dw1, N * K), db1 = buf(N, 27), db2 = copy_of(db1, N);
      sync();  // the uploads (on the default stream) have landed
      k().linear_forward(y1.as<float>(), x.as<float>(), w.as<float>(), reinterpret_cast<const bf16*>(w16_bits),
                         bias.as<float>(), M, K, N, p);
      k().linear_backward(dx1.as<float>(), dw1.as<float>(), db1.as<float>(), dy.as<float>(), x.as<float>(),
                          w.as<float>(), reinterpret_cast<const bf16*>(w16_bits), M, K, N, true, p);
      DeviceBuffer fws(cuda::linear_forward_workspace_bytes(M, K, N, in, w16_bits != nullptr));
      DeviceBuffer bws(cuda::linear_backward_workspace_bytes(M, K, N, in, w16_bits != nullptr, true));
      cuda::linear_forward(gemm, y2.as<float>(), x.as<float>(), w.as<float>(), w16_bits, bias.as<float>(), M, K, N,
                           in, fws.data());
      cuda::linear_backward(gemm, dx2.as<float>(), dw2.as<float>(), db2.as<float>(), dy.as<float>(), x.as<float>(),
                            w.as<float>(), w16_bits, M, K, N, true, in, bws.data());
      sync();
      expect_same(y1, y2, M * N, what + " y");
      expect_same(dx1, dx2, M * K, what + " dx");
      expect_same(dw1, dw2, N * K, what + " dw");
      expect_same(db1, db2, N, what + " dbias");

      // matmul: c (+)= x^T dy, [K, N], a shape whose operands are both transposed reads.
      DeviceBuffer c1 = buf(K * N, 28), c2 = copy_of(c1, K * N), mws(cuda::matmul_workspace_bytes(K, N, M, in));
      sync();
      k().matmul(c1.as<float>(), x.as<float>(), true, dy.as<float>(), false, K, N, M, true, p);
      cuda::matmul(gemm, c2.as<float>(), x.as<float>(), true, dy.as<float>(), false, K, N, M, true, in, mws.data());
      sync();
      expect_same(c1, c2, K * N, what + " matmul");
    }
}

TEST_F(CudaKernelTable, EmbeddingRmsnormAndConvert) {
  const int64_t T = 300, V = 50, C = 200;
  std::vector<int32_t> tok(T);
  for (int64_t t = 0; t < T; ++t) tok[t] = static_cast<int32_t>((t * 7 + 3) % V);
  DeviceBuffer dtok = to_device(tok), table = buf(V * C, 1), dout = buf(T * C, 2);
  DeviceBuffer o1(T * C * 4), o2(T * C * 4), dt1 = buf(V * C, 3), dt2 = copy_of(dt1, V * C);
  sync();  // the uploads (on the default stream) have landed
  k().embedding_forward(o1.as<float>(), dtok.as<int32_t>(), table.as<float>(), T, V, C);
  k().embedding_backward(dt1.as<float>(), dtok.as<int32_t>(), dout.as<float>(), T, V, C);
  cuda::embedding_forward(o2.as<float>(), dtok.as<int32_t>(), table.as<float>(), T, V, C);
  DeviceBuffer ws(cuda::embedding_backward_workspace_bytes(T));
  cuda::embedding_backward(dt2.as<float>(), dtok.as<int32_t>(), dout.as<float>(), T, V, C, ws.data());
  sync();
  expect_same(o1, o2, T * C, "embedding forward");
  expect_same(dt1, dt2, V * C, "embedding backward");

  for (float offset : {0.0f, 1.0f}) {
    DeviceBuffer x = buf(T * C, 4), w = buf(C, 5), dy = buf(T * C, 6);
    DeviceBuffer y1(T * C * 4), y2(T * C * 4), r1(T * 4), r2(T * 4), dx1(T * C * 4), dx2(T * C * 4);
    DeviceBuffer dw1 = buf(C, 7), dw2 = copy_of(dw1, C), rws(cuda::rmsnorm_backward_workspace_bytes(T, C));
    sync();  // the uploads (on the default stream) have landed
    k().rmsnorm_forward(y1.as<float>(), r1.as<float>(), x.as<float>(), w.as<float>(), T, C, 1e-6f, offset);
    k().rmsnorm_backward(dx1.as<float>(), dw1.as<float>(), dy.as<float>(), x.as<float>(), w.as<float>(),
                         r1.as<float>(), T, C, offset);
    cuda::rmsnorm_forward(y2.as<float>(), r2.as<float>(), x.as<float>(), w.as<float>(), T, C, 1e-6f, offset);
    cuda::rmsnorm_backward(dx2.as<float>(), dw2.as<float>(), dy.as<float>(), x.as<float>(), w.as<float>(),
                           r2.as<float>(), T, C, offset, rws.data());
    sync();
    const std::string o = " (w_offset " + std::to_string(offset) + ")";
    expect_same(y1, y2, T * C, "rmsnorm y" + o);
    expect_same(r1, r2, T, "rmsnorm rstd" + o);
    expect_same(dx1, dx2, T * C, "rmsnorm dx" + o);
    expect_same(dw1, dw2, C, "rmsnorm dw" + o);
  }

  // The sum of squares comes back to the host as the kernel's own double, bit for bit.
  for (int64_t n : {int64_t{1}, int64_t{1000}, (int64_t{1} << 16) * 3 + 5}) {
    DeviceBuffer x = buf(n, 9), out = to_device(std::vector<double>{0.0}), ws(cuda::sum_of_squares_workspace_bytes(n));
    sync();
    const double got = k().sum_of_squares(x.as<float>(), n);
    cuda::sum_of_squares_f64(out.as<double>(), x.as<float>(), n, ws.data());
    sync();
    EXPECT_EQ(got, to_host<double>(out, 1)[0]) << "sum of squares, n " << n;
  }

  DeviceBuffer src = buf(T * C, 8), b1(T * C * 2), b2(T * C * 2);
  sync();  // the uploads (on the default stream) have landed
  k().convert_f32_to_bf16(b1.as<bf16>(), src.as<float>(), static_cast<size_t>(T * C));
  cuda::convert_f32_to_bf16(b2.as<uint16_t>(), src.as<float>(), T * C);
  sync();
  EXPECT_EQ(to_host<uint16_t>(b1, T * C), to_host<uint16_t>(b2, T * C)) << "convert to bf16";
}

TEST_F(CudaKernelTable, GatesAndRope) {
  const int64_t n = 100000;
  DeviceBuffer g = buf(n, 11), u = buf(n, 12), dh = buf(n, 13);
  for (bool geglu : {false, true}) {
    DeviceBuffer h1(n * 4), h2(n * 4), dg1(n * 4), dg2(n * 4), du1(n * 4), du2(n * 4);
    sync();  // the uploads (on the default stream) have landed
    (geglu ? k().geglu_forward : k().swiglu_forward)(h1.as<float>(), g.as<float>(), u.as<float>(), n);
    (geglu ? k().geglu_backward : k().swiglu_backward)(dg1.as<float>(), du1.as<float>(), dh.as<float>(),
                                                       g.as<float>(), u.as<float>(), n);
    if (geglu) {
      cuda::geglu_forward(h2.as<float>(), g.as<float>(), u.as<float>(), n);
      cuda::geglu_backward(dg2.as<float>(), du2.as<float>(), dh.as<float>(), g.as<float>(), u.as<float>(), n);
    } else {
      cuda::swiglu_forward(h2.as<float>(), g.as<float>(), u.as<float>(), n);
      cuda::swiglu_backward(dg2.as<float>(), du2.as<float>(), dh.as<float>(), g.as<float>(), u.as<float>(), n);
    }
    sync();
    const std::string name = geglu ? "geglu" : "swiglu";
    expect_same(h1, h2, n, name + " h");
    expect_same(dg1, dg2, n, name + " dg");
    expect_same(du1, du2, n, name + " du");
  }

  const int64_t B = 2, S = 40, H = 3, D = 64, rotary = 32, half = rotary / 2;
  std::vector<float> cs(S * half), sn(S * half);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t i = 0; i < half; ++i) cs[s * half + i] = std::cos(0.1f * s * (i + 1)), sn[s * half + i] = std::sin(0.1f * s * (i + 1));
  std::vector<int32_t> pos(B * S);
  for (int64_t i = 0; i < B * S; ++i) pos[i] = static_cast<int32_t>((i % S) % 17);
  DeviceBuffer dc = to_device(cs), ds = to_device(sn), dp = to_device(pos);
  DeviceBuffer x1 = buf(B * S * H * D, 14), x2 = copy_of(x1, B * S * H * D);
  sync();  // the uploads (on the default stream) have landed
  k().rope_forward(x1.as<float>(), dc.as<float>(), ds.as<float>(), B, S, H, D, dp.as<int32_t>(), rotary);
  k().rope_backward(x1.as<float>(), dc.as<float>(), ds.as<float>(), B, S, H, D, nullptr, rotary);
  cuda::rope_forward(x2.as<float>(), dc.as<float>(), ds.as<float>(), B, S, H, D, dp.as<int32_t>(), rotary);
  cuda::rope_backward(x2.as<float>(), dc.as<float>(), ds.as<float>(), B, S, H, D, nullptr, rotary);
  sync();
  expect_same(x1, x2, B * S * H * D, "rope forward then backward");
}

TEST_F(CudaKernelTable, ElementwiseSteps) {
  const int64_t n = 100000, rows = 500, D = 100;  // rows * 2 * D == n
  DeviceBuffer a = buf(n, 21), b = buf(n, 22), g = buf(n, 23);
  DeviceBuffer y1 = copy_of(a, n), y2 = copy_of(a, n), z1(n * 4), z2(n * 4), dg1(n * 4), dg2(n * 4);
  std::vector<int32_t> ids(rows);
  for (int64_t t = 0; t < rows; ++t) ids[t] = static_cast<int32_t>(t % 3);
  DeviceBuffer dids = to_device(ids);
  sync();  // the uploads (on the default stream) have landed
  k().add_inplace(y1.as<float>(), b.as<float>(), n);
  k().scale_inplace(y1.as<float>(), 1.5f, n);
  k().zero_rows_with_id(y1.as<float>(), dids.as<int32_t>(), rows, 2 * D, 1);
  k().add_into(z1.as<float>(), y1.as<float>(), a.as<float>(), n);
  k().copy_rows(z1.as<float>() + D, 2 * D, b.as<float>(), D, rows, D);
  k().sigmoid_gate_forward(y1.as<float>(), z1.as<float>(), g.as<float>(), n);
  k().sigmoid_gate_backward(z1.as<float>(), dg1.as<float>(), z1.as<float>(), a.as<float>(), g.as<float>(), n);
  cuda::add_inplace(y2.as<float>(), b.as<float>(), n);
  cuda::scale_inplace(y2.as<float>(), 1.5f, n);
  cuda::zero_rows_with_id(y2.as<float>(), dids.as<int32_t>(), rows, 2 * D, 1);
  cuda::add_into(z2.as<float>(), y2.as<float>(), a.as<float>(), n);
  cuda::copy_rows(z2.as<float>() + D, 2 * D, b.as<float>(), D, rows, D);
  cuda::sigmoid_gate_forward(y2.as<float>(), z2.as<float>(), g.as<float>(), n);
  cuda::sigmoid_gate_backward(z2.as<float>(), dg2.as<float>(), z2.as<float>(), a.as<float>(), g.as<float>(), n);
  sync();
  expect_same(y1, y2, n, "adds, scale, padding rows, gate forward");
  expect_same(z1, z2, n, "row copies, gate backward dx");
  expect_same(dg1, dg2, n, "gate backward dgate");
}

TEST_F(CudaKernelTable, DeltaRuleGates) {
  const int64_t T = 300, H = 8, n = T * H;
  DeviceBuffer b = buf(n, 41), a = buf(n, 42), A_log = buf(H, 43), dt = buf(H, 44), dbeta = buf(n, 45),
               dg = buf(n, 46);
  DeviceBuffer beta1(n * 4), beta2(n * 4), decay1(n * 4), decay2(n * 4), db1(n * 4), db2(n * 4), da1(n * 4),
      da2(n * 4), ddt1 = buf(H, 47), ddt2 = copy_of(ddt1, H), dA1 = buf(H, 48), dA2 = copy_of(dA1, H);
  sync();  // the uploads (on the default stream) have landed
  k().delta_rule_gates_forward(beta1.as<float>(), decay1.as<float>(), b.as<float>(), a.as<float>(),
                               A_log.as<float>(), dt.as<float>(), T, H);
  k().delta_rule_gates_backward(db1.as<float>(), da1.as<float>(), ddt1.as<float>(), dA1.as<float>(),
                                dbeta.as<float>(), dg.as<float>(), a.as<float>(), beta1.as<float>(),
                                decay1.as<float>(), A_log.as<float>(), dt.as<float>(), T, H);
  cuda::delta_rule_gates_forward(beta2.as<float>(), decay2.as<float>(), b.as<float>(), a.as<float>(),
                                 A_log.as<float>(), dt.as<float>(), T, H);
  cuda::delta_rule_gates_backward(db2.as<float>(), da2.as<float>(), ddt2.as<float>(), dA2.as<float>(),
                                  dbeta.as<float>(), dg.as<float>(), a.as<float>(), beta2.as<float>(),
                                  decay2.as<float>(), A_log.as<float>(), dt.as<float>(), T, H);
  sync();
  expect_same(beta1, beta2, n, "beta");
  expect_same(decay1, decay2, n, "decay");
  expect_same(db1, db2, n, "db");
  expect_same(da1, da2, n, "da");
  expect_same(ddt1, ddt2, H, "d_dt_bias");
  expect_same(dA1, dA2, H, "d_A_log");
}

TEST_F(CudaKernelTable, Attention) {
  const int64_t B = 2, S = 50, Hq = 4, Hkv = 2, D = 64, window = 9;
  const float scale = 0.125f;
  std::vector<int32_t> doc(B * S);
  for (int64_t i = 0; i < B * S; ++i) doc[i] = static_cast<int32_t>(i % S < 20 ? (i / S) * S : (i / S) * S + 20);
  DeviceBuffer ddoc = to_device(doc), q = buf(B * S * Hq * D, 21), kk = buf(B * S * Hkv * D, 22),
               v = buf(B * S * Hkv * D, 23), dout = buf(B * S * Hq * D, 24);
  DeviceBuffer o1(B * S * Hq * D * 4), o2(B * S * Hq * D * 4), l1(B * Hq * S * 4), l2(B * Hq * S * 4);
  DeviceBuffer dq1(B * S * Hq * D * 4), dq2(B * S * Hq * D * 4), dk1(B * S * Hkv * D * 4), dk2(B * S * Hkv * D * 4),
      dv1(B * S * Hkv * D * 4), dv2(B * S * Hkv * D * 4),
      fws(cuda::attention_forward_bf16_workspace_bytes(B, S, Hq, Hkv, D)),
      ws(cuda::attention_backward_bf16_workspace_bytes(B, S, Hq, Hkv, D));
  sync();  // the uploads (on the default stream) have landed
  // Under fp32 the table runs the fp32 kernels, under bf16 the tensor-core ones.
  for (const Precision p : {Precision::F32, Precision::BF16}) {
    const bool bf16 = p == Precision::BF16;
    // The bf16 ones take a workspace: the forward's after v, the backward's after lse.
    const auto forward = [bf16, &fws](float* o, float* lse, const float* q, const float* k, const float* v,
                                      auto... rest) {
      if (bf16) cuda::attention_forward_bf16(o, lse, q, k, v, fws.data(), rest...);
      else cuda::attention_forward(o, lse, q, k, v, rest...);
    };
    const auto backward = [bf16, &ws](float* dq, float* dk, float* dv, const float* dout, const float* q,
                                      const float* k, const float* v, const float* o, const float* lse, auto... rest) {
      if (bf16) cuda::attention_backward_bf16(dq, dk, dv, dout, q, k, v, o, lse, ws.data(), rest...);
      else cuda::attention_backward(dq, dk, dv, dout, q, k, v, o, lse, rest...);
    };
    k().attention_forward(o1.as<float>(), l1.as<float>(), q.as<float>(), kk.as<float>(), v.as<float>(), B, S, Hq, Hkv,
                          D, scale, ddoc.as<int32_t>(), window, p);
    k().attention_backward(dq1.as<float>(), dk1.as<float>(), dv1.as<float>(), dout.as<float>(), q.as<float>(),
                           kk.as<float>(), v.as<float>(), o1.as<float>(), l1.as<float>(), B, S, Hq, Hkv, D, scale,
                           ddoc.as<int32_t>(), window, p);
    forward(o2.as<float>(), l2.as<float>(), q.as<float>(), kk.as<float>(), v.as<float>(), B, S, Hq, Hkv, D, scale,
            ddoc.as<int32_t>(), window, nullptr);
    backward(dq2.as<float>(), dk2.as<float>(), dv2.as<float>(), dout.as<float>(), q.as<float>(), kk.as<float>(),
             v.as<float>(), o2.as<float>(), l2.as<float>(), B, S, Hq, Hkv, D, scale, ddoc.as<int32_t>(), window,
             nullptr);
    sync();
    const std::string tag = bf16 ? "bf16 attention " : "attention ";
    expect_same(o1, o2, B * S * Hq * D, tag + "o");
    expect_same(l1, l2, B * Hq * S, tag + "lse");
    expect_same(dq1, dq2, B * S * Hq * D, tag + "dq");
    expect_same(dk1, dk2, B * S * Hkv * D, tag + "dk");
    expect_same(dv1, dv2, B * S * Hkv * D, tag + "dv");
  }
}

TEST_F(CudaKernelTable, HybridLayers) {
  // The causal conv1d: the shape struct unpacked in its order.
  const CausalConvShape cs{2, 37, 96, 4};
  const int64_t n = cs.batch * cs.seq * cs.channels;
  DeviceBuffer x = buf(n, 31), w = buf(cs.channels * cs.kernel, 32), dy = buf(n, 33);
  DeviceBuffer y1(n * 4), y2(n * 4), dx1(n * 4), dx2(n * 4), dw1 = buf(cs.channels * cs.kernel, 34),
      dw2 = copy_of(dw1, cs.channels * cs.kernel);
  DeviceBuffer cws(cuda::causal_conv1d_backward_workspace_bytes(cs.batch, cs.seq, cs.channels, cs.kernel));
  sync();  // the uploads (on the default stream) have landed
  k().causal_conv1d_silu_forward(y1.as<float>(), x.as<float>(), w.as<float>(), cs);
  k().causal_conv1d_silu_backward(dx1.as<float>(), dw1.as<float>(), dy.as<float>(), x.as<float>(), w.as<float>(), cs);
  cuda::causal_conv1d_silu_forward(y2.as<float>(), x.as<float>(), w.as<float>(), cs.batch, cs.seq, cs.channels,
                                   cs.kernel);
  cuda::causal_conv1d_silu_backward(dx2.as<float>(), dw2.as<float>(), dy.as<float>(), x.as<float>(), w.as<float>(),
                                    cs.batch, cs.seq, cs.channels, cs.kernel, cws.data());
  sync();
  expect_same(y1, y2, n, "conv y");
  expect_same(dx1, dx2, n, "conv dx");
  expect_same(dw1, dw2, cs.channels * cs.kernel, "conv dw");

  // The gated RMSNorm: the table's workspace size is in floats.
  const int64_t T = 130, D = 128;
  DeviceBuffer gx = buf(T * D, 41), gz = buf(T * D, 42), gw = buf(D, 43), gdy = buf(T * D, 44);
  DeviceBuffer gy1(T * D * 4), gy2(T * D * 4), gr1(T * 4), gr2(T * 4), gdx1(T * D * 4), gdx2(T * D * 4),
      gdz1(T * D * 4), gdz2(T * D * 4), gdw1 = buf(D, 45), gdw2 = copy_of(gdw1, D);
  DeviceBuffer gws1(k().gated_rmsnorm_backward_workspace_floats(T, D) * 4),
      gws2(cuda::gated_rmsnorm_backward_workspace_bytes(T, D));
  sync();  // the uploads (on the default stream) have landed
  k().gated_rmsnorm_forward(gy1.as<float>(), gr1.as<float>(), gx.as<float>(), gz.as<float>(), gw.as<float>(), T, D,
                            1e-6f);
  k().gated_rmsnorm_backward(gdx1.as<float>(), gdz1.as<float>(), gdw1.as<float>(), gdy.as<float>(), gx.as<float>(),
                             gz.as<float>(), gw.as<float>(), gr1.as<float>(), T, D, gws1.as<float>());
  cuda::gated_rmsnorm_forward(gy2.as<float>(), gr2.as<float>(), gx.as<float>(), gz.as<float>(), gw.as<float>(), T, D,
                              1e-6f);
  cuda::gated_rmsnorm_backward(gdx2.as<float>(), gdz2.as<float>(), gdw2.as<float>(), gdy.as<float>(), gx.as<float>(),
                               gz.as<float>(), gw.as<float>(), gr2.as<float>(), T, D, gws2.data());
  sync();
  expect_same(gy1, gy2, T * D, "gated rmsnorm y");
  expect_same(gdx1, gdx2, T * D, "gated rmsnorm dx");
  expect_same(gdz1, gdz2, T * D, "gated rmsnorm dz");
  expect_same(gdw1, gdw2, D, "gated rmsnorm dw");

  // The gated delta rule: every pointer in its place (an initial state and a final-state
  // gradient, so none is null), workspaces in floats.
  const GatedDeltaShape s{1, 70, 1, 2, 32, 16, 32};
  const int64_t nqk = s.batch * s.seq * s.k_heads * s.k_dim, nv = s.batch * s.seq * s.v_heads * s.v_dim,
                ng = s.batch * s.seq * s.v_heads, ns = s.state_floats(), nc = s.chunk_state_floats();
  std::vector<float> gh = test::normal_floats(ng, 0.3f, 51), bh = test::normal_floats(ng, 0.2f, 52, 0.5f);
  for (float& e : gh) e = -std::fabs(e);  // log decays <= 0
  DeviceBuffer q = buf(nqk, 53), kk = buf(nqk, 54), v = buf(nv, 55), g = to_device(gh), beta = to_device(bh),
               s0 = buf(ns, 56), dout = buf(nv, 57), dfin = buf(ns, 58);
  DeviceBuffer out1(nv * 4), out2(nv * 4), fin1(ns * 4), fin2(ns * 4), ch1(nc * 4), ch2(nc * 4);
  DeviceBuffer fws1(k().gated_delta_rule_forward_workspace_floats(s) * 4),
      fws2(cuda::gated_delta_rule_forward_workspace_bytes(s));
  sync();  // the uploads (on the default stream) have landed
  k().gated_delta_rule_forward(out1.as<float>(), fin1.as<float>(), ch1.as<float>(), q.as<float>(), kk.as<float>(),
                               v.as<float>(), g.as<float>(), beta.as<float>(), s0.as<float>(), s, fws1.as<float>());
  cuda::gated_delta_rule_forward(out2.as<float>(), fin2.as<float>(), ch2.as<float>(), q.as<float>(), kk.as<float>(),
                                 v.as<float>(), g.as<float>(), beta.as<float>(), s0.as<float>(), s, fws2.data());
  sync();
  expect_same(out1, out2, nv, "gated delta out");
  expect_same(fin1, fin2, ns, "gated delta final state");
  expect_same(ch1, ch2, nc, "gated delta chunk states");
  DeviceBuffer dq1(nqk * 4), dq2(nqk * 4), dk1(nqk * 4), dk2(nqk * 4), dv1(nv * 4), dv2(nv * 4), dg1(ng * 4),
      dg2(ng * 4), db1(ng * 4), db2(ng * 4), ds1(ns * 4), ds2(ns * 4);
  DeviceBuffer bws1(k().gated_delta_rule_backward_workspace_floats(s) * 4),
      bws2(cuda::gated_delta_rule_backward_workspace_bytes(s));
  sync();  // the uploads (on the default stream) have landed
  k().gated_delta_rule_backward(dq1.as<float>(), dk1.as<float>(), dv1.as<float>(), dg1.as<float>(), db1.as<float>(),
                                ds1.as<float>(), dout.as<float>(), dfin.as<float>(), q.as<float>(), kk.as<float>(),
                                v.as<float>(), g.as<float>(), beta.as<float>(), ch1.as<float>(), s, bws1.as<float>());
  cuda::gated_delta_rule_backward(dq2.as<float>(), dk2.as<float>(), dv2.as<float>(), dg2.as<float>(), db2.as<float>(),
                                  ds2.as<float>(), dout.as<float>(), dfin.as<float>(), q.as<float>(), kk.as<float>(),
                                  v.as<float>(), g.as<float>(), beta.as<float>(), ch2.as<float>(), s, bws2.data());
  sync();
  expect_same(dq1, dq2, nqk, "gated delta dq");
  expect_same(dk1, dk2, nqk, "gated delta dk");
  expect_same(dv1, dv2, nv, "gated delta dv");
  expect_same(dg1, dg2, ng, "gated delta dg");
  expect_same(db1, db2, ng, "gated delta dbeta");
  expect_same(ds1, ds2, ns, "gated delta d_initial_state");
}

}  // namespace
}  // namespace lt
