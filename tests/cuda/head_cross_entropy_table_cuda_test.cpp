// The kernel table's head cross-entropy on the GPU (kernels/cuda/head_cross_entropy_table.h):
// its numbers are the kernel's, which tests/cuda/cross_entropy_cuda_test.cpp checks against
// float64, so what is checked here is that the entries reach that kernel with the right
// inputs and sub-chunks, by bits:
//  - the whole call, fp32 and bf16 (with the head's bf16 copy, and without it, when the
//    entry rounds the rows itself), equals cuda::head_cross_entropy run directly on the
//    rounded inputs with the entry's sub-chunk;
//  - the streamed form over row chunks of one and two sub-chunks equals the whole call;
//  - the sub-chunk shrinks to keep one sub-chunk's logits within max_logit_bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "cuda_test_util.h"
#include "kernel_table_fixture.h"
#include "kernels/cuda/cross_entropy_cuda.h"
#include "kernels/cuda/cuda_kernel_table.h"
#include "kernels/cuda/head_cross_entropy_table.h"

namespace lt {
namespace {

using cuda::DeviceBuffer;
using cuda::to_device;
using cuda::to_host;

struct HeadProblem {
  int64_t T, C, V;
  std::vector<float> x, w, dw0;
  std::vector<int32_t> targets;
};

HeadProblem problem(int64_t T, int64_t C, int64_t V) {
  HeadProblem p{T, C, V, test::normal_floats(T * C, 1.0f, 51), test::normal_floats(V * C, 0.2f, 52),
                test::normal_floats(V * C, 0.01f, 53), std::vector<int32_t>(T)};
  for (int64_t t = 0; t < T; ++t) p.targets[t] = t % 5 == 4 ? -100 : static_cast<int32_t>((t * 7919) % V);
  return p;
}

struct HeadOut {
  double loss = 0;
  std::vector<float> dx, dw;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
void expect_same(const HeadOut& a, const HeadOut& b, const std::string& what) {
  EXPECT_EQ(std::memcmp(&a.loss, &b.loss, sizeof(double)), 0) << what << ": loss " << a.loss << " vs " << b.loss;
  EXPECT_TRUE(same_bits(a.dx, b.dx)) << what << ": dx";
  EXPECT_TRUE(same_bits(a.dw, b.dw)) << what << ": dw";
}

class CudaHeadTable : public test::CudaTableTest {
 protected:
  // The entry's whole call; bf16_rows: pass the head's bf16 copy under BF16.
  HeadOut whole(const HeadProblem& pr, Precision p, bool bf16_rows, const CrossEntropyOptions& opt = {}) {
    const DeviceBuffer x = to_device(pr.x), w = to_device(pr.w), tg = to_device(pr.targets);
    std::vector<float> wr = pr.w;
    const std::vector<uint16_t> w16 = test::round_to_bf16(wr);
    const DeviceBuffer wb = to_device(w16);
    DeviceBuffer dx = to_device(std::vector<float>(pr.T * pr.C, NAN)), dw = to_device(pr.dw0);  // dx: overwritten
    DeviceBuffer ws(k().head_cross_entropy_workspace_bytes(pr.T, pr.C, pr.V, p, false, opt));
    sync();  // the uploads (default stream) before the table's stream reads them
    HeadOut o;
    o.loss = k().head_cross_entropy(dx.as<float>(), dw.as<float>(), x.as<float>(), bf16_rows ? nullptr : w.as<float>(),
                                    bf16_rows ? wb.as<bf16>() : nullptr, tg.as<int32_t>(), pr.T, pr.C, pr.V,
                                    1.0f / pr.T, p, opt, ws.data());
    sync();
    o.dx = to_host<float>(dx, pr.T * pr.C), o.dw = to_host<float>(dw, pr.V * pr.C);
    return o;
  }

  // The entry's stream over row chunks of `rows`, each chunk's gradient rows in a buffer of
  // its own (the executor's slots), starting from dw0's rows.
  HeadOut streamed(const HeadProblem& pr, Precision p, int64_t rows) {
    const DeviceBuffer x = to_device(pr.x), w = to_device(pr.w), tg = to_device(pr.targets);
    DeviceBuffer dx = to_device(std::vector<float>(pr.T * pr.C, NAN));  // overwritten by the first chunk
    DeviceBuffer ws(k().head_cross_entropy_workspace_bytes(pr.T, pr.C, pr.V, p, true, {}));
    sync();
    auto ce = k().head_cross_entropy_stream(x.as<float>(), tg.as<int32_t>(), pr.T, pr.C, pr.V, 1.0f / pr.T, p, {},
                                            ws.data());
    for (int64_t v0 = 0; v0 < pr.V; v0 += rows)
      ce->forward(w.as<float>() + v0 * pr.C, nullptr, v0, std::min(rows, pr.V - v0));
    HeadOut o;
    o.dw = pr.dw0;
    for (int64_t v0 = 0; v0 < pr.V; v0 += rows) {
      const int64_t nv = std::min(rows, pr.V - v0);
      DeviceBuffer chunk = to_device(std::vector<float>(o.dw.begin() + v0 * pr.C, o.dw.begin() + (v0 + nv) * pr.C));
      sync();
      ce->backward(dx.as<float>(), chunk.as<float>(), w.as<float>() + v0 * pr.C, nullptr, v0, nv);
      sync();
      const std::vector<float> back = to_host<float>(chunk, nv * pr.C);
      std::copy(back.begin(), back.end(), o.dw.begin() + v0 * pr.C);
    }
    o.loss = ce->loss();
    o.dx = to_host<float>(dx, pr.T * pr.C);
    return o;
  }
};

// cuda::head_cross_entropy directly on the inputs the entry's precision makes.
HeadOut direct(const HeadProblem& pr, Precision p, int64_t vocab_chunk) {
  const bool bf = p == Precision::BF16;
  std::vector<float> x = pr.x, w = pr.w;
  std::vector<uint16_t> x16, w16;
  if (bf) x16 = test::round_to_bf16(x), w16 = test::round_to_bf16(w);
  const DeviceBuffer dxin = bf ? to_device(x16) : to_device(x), dwin = bf ? to_device(w16) : to_device(w);
  const DeviceBuffer tg = to_device(pr.targets);
  // dx starts as NaN: overwritten by the first sub-chunk.
  DeviceBuffer dx = to_device(std::vector<float>(pr.T * pr.C, NAN)), dw = to_device(pr.dw0), loss(8);
  const cuda::GemmInput input = bf ? cuda::GemmInput::BF16 : cuda::GemmInput::F32;
  DeviceBuffer ws(cuda::head_cross_entropy_workspace_bytes(pr.T, pr.V, vocab_chunk, input));
  cuda::Gemm gemm;
  cuda::HeadCrossEntropyArgs a;
  a.x = dxin.data(), a.w = dwin.data(), a.targets = tg.as<int32_t>();
  a.T = pr.T, a.C = pr.C, a.V = pr.V, a.input = input, a.grad_scale = 1.0f / pr.T;
  a.loss = loss.as<double>(), a.dx = dx.as<float>(), a.dw = dw.as<float>(), a.vocab_chunk = vocab_chunk;
  cuda::head_cross_entropy(gemm, a, ws.data());
  cuda::device_synchronize();
  return {to_host<double>(loss, 1)[0], to_host<float>(dx, pr.T * pr.C), to_host<float>(dw, pr.V * pr.C)};
}

TEST_F(CudaHeadTable, WholeCallIsTheKernelOnTheRoundedInputs) {
  const HeadProblem pr = problem(96, 64, 3 * 1024 + 37);
  const CrossEntropyOptions opt{.vocab_chunk = 1024};  // four sub-chunks, the last ragged
  for (Precision p : {Precision::F32, Precision::BF16}) {
    const std::string name = p == Precision::BF16 ? "bf16" : "fp32";
    const int64_t vc = cuda::table_head_vocab_chunk(pr.T, pr.V, p, opt);
    ASSERT_EQ(vc, 1024) << name;
    const HeadOut want = direct(pr, p, vc);
    expect_same(whole(pr, p, /*bf16_rows=*/false, opt), want, name + " whole call");
    if (p == Precision::BF16) expect_same(whole(pr, p, /*bf16_rows=*/true, opt), want, "bf16 with the bf16 copy");
  }
}

TEST_F(CudaHeadTable, StreamedEqualsWholeCall) {
  const HeadProblem pr = problem(40, 32, 2 * kCrossEntropyVocabChunk + 37);  // default sub-chunks, ragged third
  for (Precision p : {Precision::F32, Precision::BF16}) {
    const std::string name = p == Precision::BF16 ? "bf16" : "fp32";
    const HeadOut w = whole(pr, p, /*bf16_rows=*/false);
    const int64_t sub = k().head_cross_entropy_vocab_chunk(pr.T, pr.V, p);
    ASSERT_LT(sub, pr.V) << name;
    for (int64_t rows : {sub, 2 * sub}) expect_same(streamed(pr, p, rows), w, name + " rows " + std::to_string(rows));
  }
}

TEST(CudaHeadTableChunk, SubChunkKeepsLogitsWithinTheBudget) {
  // 1000 tokens x 16384 rows x 4 bytes is past 32 MiB: halved to 8192 (6 bytes under bf16: 4096).
  EXPECT_EQ(cuda::table_head_vocab_chunk(1000, 50000, Precision::F32), 8192);
  EXPECT_EQ(cuda::table_head_vocab_chunk(1000, 50000, Precision::BF16), 4096);
  EXPECT_EQ(cuda::table_head_vocab_chunk(10, 500, Precision::F32), 500);
  EXPECT_EQ(cuda::table_head_vocab_chunk(1 << 30, 500, Precision::F32), 1);
}

}  // namespace
}  // namespace lt
