// The Gated DeltaNet token mixer (layers/linear_attention_mixer.h) against transformers'
// Qwen3_5GatedDeltaNet run with autograd in float64 (tests/reference/
// qwen3_5_linear_attention.py) on the fp32 weights and input written here: the output,
// dh and every la_* gradient, fp32 and bf16; plus thread-count invariance and the
// workspace size.
//
// Cases: grouped value heads (Hk 2, Hv 4), dk != dv, S 70 = one full chunk of 64 and a
// partial one, B 2; and Hv == Hk with S 37 (a single partial chunk), B 3, conv kernel 3.
// One head has dt_bias 25 so that a + dt_bias > 20 there: softplus's threshold branch.
//
// Bounds, relative in the Frobenius norm (||got - want|| / ||want||):
//  - fp32: the issue's, 1e-5 for the output and 1e-4 for each gradient. The reference is
//    float64 (its own error ~2^-53, negligible), so these bound our fp32 error alone.
//  - bf16 (Precision::BF16, bf16 copies of the five matrices): every matmul rounds both
//    operands to bf16 (unit roundoff u = 2^-8) and accumulates in fp32. Each distinct
//    rounded operand is one relative perturbation of at most u; to first order, with the
//    layer's maps taken as not amplifying a relative perturbation, each contributes at most
//    u to a result downstream of it. The longest chain is dh's: h, in_proj_qkv/z/b/a
//    (forward), d_out and out_proj (dy), and the four projections' output gradients
//    dqkv, dz, db, da = 11 rounded operands (out has 7: h, the four in_proj, y,
//    out_proj; the weight gradients 7 or 8). All are checked against 11 u + the fp32 bound.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/dtype.h"
#include "kernels/kernel_test_util.h"
#include "layers/linear_attention_mixer.h"
#include "test_util.h"

namespace lt {
namespace {

constexpr double kOutBound = 1e-5, kGradBound = 1e-4;  // the fp32 bounds
constexpr double kBf16Operands = 11;                   // dh's chain, see above

struct Case {
  int64_t B, S, C, Hk, Hv, dk, dv, K;
  bool strong_decay = false;  // transformers' initialisation of A and dt_bias, see make_weights
  LinearMixerShape shape() const {
    LinearMixerShape s;
    s.batch = B;
    s.seq = S;
    s.hidden = C;
    s.la = LinearAttentionShape{Hk, Hv, dk, dv, K};
    s.norm_eps = 1e-6f;
    s.chunk = 64;  // transformers' default chunk_size, which the layer's forward uses
    return s;
  }
};

// The nine la_* tensors, in the reference script's order and names.
constexpr int kTensors = 9;
const char* const kNames[kTensors] = {"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "conv1d",
                                      "dt_bias",     "A_log",     "norm",      "out_proj"};
float* BlockTensors::*const kMembers[kTensors] = {
    &BlockTensors::la_in_proj_qkv, &BlockTensors::la_in_proj_z, &BlockTensors::la_in_proj_b,
    &BlockTensors::la_in_proj_a,   &BlockTensors::la_conv1d,    &BlockTensors::la_dt_bias,
    &BlockTensors::la_A_log,       &BlockTensors::la_norm,      &BlockTensors::la_out_proj};

std::vector<size_t> tensor_sizes(const Case& c) {
  const LinearAttentionShape la = c.shape().la;
  const int64_t C = c.C;
  return {size_t(la.conv_dim() * C), size_t(la.value_dim() * C), size_t(c.Hv * C), size_t(c.Hv * C),
          size_t(la.conv_dim() * c.K), size_t(c.Hv), size_t(c.Hv), size_t(c.dv), size_t(C * la.value_dim())};
}

struct Weights {
  std::vector<std::vector<float>> t;  // kTensors tensors
  std::vector<bf16> qkv, z, b, a, out;  // the bf16 copies of the five matrices
  BlockTensors view() {
    BlockTensors w;
    for (int i = 0; i < kTensors; ++i) w.*kMembers[i] = t[size_t(i)].data();
    return w;
  }
  BlockTensorsBf16 bf16_view() const {
    BlockTensorsBf16 wb;
    wb.la_in_proj_qkv = qkv.data();
    wb.la_in_proj_z = z.data();
    wb.la_in_proj_b = b.data();
    wb.la_in_proj_a = a.data();
    wb.la_out_proj = out.data();
    return wb;
  }
};

std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> r(v.size());
  convert_f32_to_bf16(r.data(), v.data(), v.size());
  return r;
}

Weights make_weights(const Case& c, uint64_t seed) {
  const auto n = tensor_sizes(c);
  Weights w;
  // Projections scaled so that their outputs are O(1) (C inputs of U(-1,1) each).
  const float p = 2.0f / std::sqrt(float(c.C));
  w.t = {test::random_floats(n[0], seed + 1, -p, p), test::random_floats(n[1], seed + 2, -p, p),
         test::random_floats(n[2], seed + 3, -p, p), test::random_floats(n[3], seed + 4, -p, p),
         test::random_floats(n[4], seed + 5, -0.8f, 0.8f), test::random_floats(n[5], seed + 6, -1.5f, 1.5f),
         test::random_floats(n[6], seed + 7), test::random_floats(n[7], seed + 8, 0.5f, 1.5f),
         test::random_floats(n[8], seed + 9, -p, p)};
  // A = exp(A_log) in [0.37, 2.7]; head 0 takes softplus's threshold branch (a + 25 > 20,
  // |a| is a few units at most) with a small A so its decay stays moderate.
  w.t[5][0] = 25.0f;
  w.t[6][0] = std::log(0.02f);
  if (c.strong_decay) {
    // As Qwen3_5GatedDeltaNet initialises them: A ~ U(0, 16), dt_bias = 1, so g = -A
    // softplus(a + 1) reaches about -20 per token and the in-chunk cumulative decay about
    // -1000: the regime where a float difference of cumulative decays loses digits.
    const auto A = test::random_floats(n[6], seed + 10, 0.5f, 16.0f);
    for (size_t j = 0; j < n[6]; ++j) w.t[5][j] = 1.0f, w.t[6][j] = std::log(A[j]);
  }
  w.qkv = to_bf16(w.t[0]);
  w.z = to_bf16(w.t[1]);
  w.b = to_bf16(w.t[2]);
  w.a = to_bf16(w.t[3]);
  w.out = to_bf16(w.t[8]);
  return w;
}

// The saved tensors at the sizes the header lists, each its own exact-size buffer.
struct Saved {
  std::vector<std::vector<float>> bufs;
  BlockSaved view;
  explicit Saved(const LinearMixerShape& s) {
    const int64_t T = s.tokens(), Kd = s.la.key_dim(), Vd = s.la.value_dim(), Hv = s.la.value_heads;
    const int64_t chunks = (s.seq + s.chunk - 1) / s.chunk;
    float* BlockSaved::*members[] = {&BlockSaved::conv_in,      &BlockSaved::conv_q,    &BlockSaved::conv_k,
                                     &BlockSaved::conv_v,       &BlockSaved::z,         &BlockSaved::beta,
                                     &BlockSaved::decay,        &BlockSaved::chunk_states,
                                     &BlockSaved::delta_out,    &BlockSaved::delta_norm_rstd,
                                     &BlockSaved::delta_gated};
    const int64_t sizes[] = {T * s.la.conv_dim(), T * Kd, T * Kd, T * Vd, T * Vd, T * Hv, T * Hv,
                             s.batch * Hv * chunks * s.la.key_head_dim * s.la.value_head_dim,
                             T * Vd, T * Hv, T * Vd};
    for (size_t i = 0; i < std::size(sizes); ++i) {
      bufs.emplace_back(size_t(sizes[i]), std::numeric_limits<float>::quiet_NaN());
      view.*members[i] = bufs.back().data();
    }
  }
};

// What one forward + backward gives: out, dh, then the nine gradients.
using Results = std::vector<std::vector<float>>;

// Runs forward and backward with the workspace at ws (which must hold
// linear_mixer_workspace_floats); the gradients start from zero, as torch's .grad does.
Results run_mixer(const Case& c, Weights& w, const std::vector<float>& h, const std::vector<float>& dout,
                  Precision p, float* ws) {
  const LinearMixerShape s = c.shape();
  const size_t TC = size_t(s.tokens() * s.hidden);
  Saved saved(s);
  Results r(2 + kTensors);
  r[0].assign(TC, 0.0f);
  r[1].assign(TC, 0.0f);
  const auto n = tensor_sizes(c);
  BlockTensors g;
  for (int i = 0; i < kTensors; ++i) {
    r[size_t(2 + i)].assign(n[size_t(i)], 0.0f);
    g.*kMembers[i] = r[size_t(2 + i)].data();
  }
  const BlockTensors wv = w.view();
  const BlockTensorsBf16 wb = w.bf16_view();
  linear_mixer_forward(cpu_kernel_table(), r[0].data(), saved.view, h.data(), wv, wb, s, p, ws);
  linear_mixer_backward(cpu_kernel_table(), r[1].data(), g, dout.data(), h.data(), wv, wb, saved.view, s, p, ws);
  return r;
}

Results run_mixer(const Case& c, Weights& w, const std::vector<float>& h, const std::vector<float>& dout,
                  Precision p) {
  std::vector<float> ws(linear_mixer_workspace_floats(cpu_kernel_table(), c.shape()));
  return run_mixer(c, w, h, dout, p, ws.data());
}

using test::read_raw_f64;
using test::write_raw_f32;

template <typename T>  // float (ours) or double (transformers' fp32 values, read as float64)
double relative_frobenius(const std::vector<T>& got, const std::vector<double>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = double(got[i]) - want[i];
    err += d * d;
    norm += want[i] * want[i];
  }
  return std::sqrt(err / norm);  // NaN (fails every check) if got has a NaN
}

struct Inputs {
  std::vector<float> h, dout;
};
Inputs make_inputs(const Case& c, uint64_t seed) {
  const size_t TC = size_t(c.B * c.S * c.C);
  return {test::random_floats(TC, seed), test::random_floats(TC, seed + 1)};
}

const char* result_name(size_t i) { return i == 0 ? "out" : i == 1 ? "dh" : kNames[i - 2]; }

// transformers' float64 out, dh and gradients (in Results order) for these weights and
// inputs; empty when the script failed (the caller's ASSERT_PYTHON_OK reports it).
std::vector<std::vector<double>> reference(const Case& c, const Weights& w, const Inputs& in,
                                           const test::TempDir& dir, test::PythonResult& r) {
  write_raw_f32(dir.str() + "/h.bin", in.h);
  write_raw_f32(dir.str() + "/dout.bin", in.dout);
  for (int i = 0; i < kTensors; ++i) write_raw_f32(dir.str() + "/" + kNames[i] + ".bin", w.t[size_t(i)]);
  std::ostringstream args;
  args << dir.str() << " " << c.B << " " << c.S << " " << c.C << " " << c.Hk << " " << c.Hv << " " << c.dk
       << " " << c.dv << " " << c.K << " " << c.shape().norm_eps << " fp32";
  r = test::run_reference_script("qwen3_5_linear_attention.py", args.str());
  if (r.exit_code != 0) return {};
  const size_t TC = size_t(c.B * c.S * c.C);
  const auto n = tensor_sizes(c);
  std::vector<std::vector<double>> want;
  want.push_back(read_raw_f64(dir.str() + "/out.bin", TC));
  want.push_back(read_raw_f64(dir.str() + "/dh.bin", TC));
  for (int i = 0; i < kTensors; ++i)
    want.push_back(read_raw_f64(dir.str() + "/d_" + kNames[i] + ".bin", n[size_t(i)]));
  // then transformers' own fp32 results, in the same order (for scale only)
  want.push_back(read_raw_f64(dir.str() + "/f32_out.bin", TC));
  want.push_back(read_raw_f64(dir.str() + "/f32_dh.bin", TC));
  for (int i = 0; i < kTensors; ++i)
    want.push_back(read_raw_f64(dir.str() + "/f32_d_" + kNames[i] + ".bin", n[size_t(i)]));
  return want;
}


// Checks each result within bound (out: out_bound, the rest grad_bound) and prints the errors.
// Checks each result within bound (out: out_bound, the rest grad_bound) and prints the errors,
// beside transformers' own fp32 error against the same float64 reference (for scale).
void expect_close(const Results& got, const std::vector<std::vector<double>>& want,
                  const std::vector<std::vector<double>>& torch_f32, double out_bound, double grad_bound,
                  const char* what) {
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = relative_frobenius(got[i], want[i]), bound = i == 0 ? out_bound : grad_bound;
    EXPECT_LE(err, bound) << what << " " << result_name(i) << ": relative Frobenius error " << err;
    std::printf("  %s %-12s rel. Frobenius error %.3e (bound %.3e; transformers fp32 %.3e)\n", what,
                result_name(i), err, bound, relative_frobenius(torch_f32[i], want[i]));
  }
}

void check_against_transformers(const Case& c, bool with_bf16) {
  Weights w = make_weights(c, 100);
  const Inputs in = make_inputs(c, 200);
  test::TempDir dir("linear-mixer");
  test::PythonResult r;
  auto want = reference(c, w, in, dir, r);
  ASSERT_PYTHON_OK(r);
  ASSERT_EQ(want.size(), size_t(2 * (2 + kTensors)));
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_FALSE(want[i].empty()) << "short " << result_name(i % (2 + kTensors)) << " from the reference:\n"
                                  << r.output;
  const std::vector<std::vector<double>> torch_f32(want.begin() + 2 + kTensors, want.end());
  want.resize(2 + kTensors);
  expect_close(run_mixer(c, w, in.h, in.dout, Precision::F32), want, torch_f32, kOutBound, kGradBound, "fp32");
  if (with_bf16) {
    const double b = kBf16Operands * test::kUBf16;
    expect_close(run_mixer(c, w, in.h, in.dout, Precision::BF16), want, torch_f32, b + kOutBound, b + kGradBound,
                 "bf16");
  }
}

const Case kGrouped{2, 70, 48, 2, 4, 8, 12, 4};  // Hv = 2 Hk; S = 64 + 6
const Case kUngrouped{3, 37, 32, 3, 3, 16, 8, 3};  // Hv == Hk; S < one chunk
const Case kStrongDecay{2, 140, 48, 2, 4, 8, 12, 4, true};  // two full chunks and a partial one

TEST(LinearAttentionMixer, MatchesTransformersGroupedHeads) { check_against_transformers(kGrouped, true); }

TEST(LinearAttentionMixer, MatchesTransformersEqualHeads) { check_against_transformers(kUngrouped, false); }

TEST(LinearAttentionMixer, MatchesTransformersUnderStrongDecay) { check_against_transformers(kStrongDecay, false); }

// The same bits with 1 and 2 threads, fp32 and bf16.
TEST(LinearAttentionMixer, ThreadCountInvariant) {
  for (const Case& c : {kGrouped, kUngrouped})
    for (Precision p : {Precision::F32, Precision::BF16}) {
      Weights w = make_weights(c, 300);
      const Inputs in = make_inputs(c, 400);
      Results first;
      for (int threads : {1, 2}) {
        test::ScopedThreads scoped(threads);
        Results r = run_mixer(c, w, in.h, in.dout, p);
        if (first.empty()) {
          first = std::move(r);
          continue;
        }
        for (size_t i = 0; i < r.size(); ++i)
          EXPECT_EQ(0, std::memcmp(r[i].data(), first[i].data(), r[i].size() * sizeof(float)))
              << result_name(i) << " differs between 1 and " << threads << " threads (S " << c.S
              << ", " << (p == Precision::BF16 ? "bf16" : "fp32") << ")";
      }
    }
}

// linear_mixer_workspace_floats is enough and all of it is scratch: with exactly that many
// floats, NaN-filled (a read of a float the passes did not write first would spread NaN),
// and a NaN-filled guard after it that must stay untouched, the results are the bits of a
// run on a zero-filled workspace. The saved buffers are exact-size and NaN-filled too
// (Saved), so an out-of-bounds or unwritten saved float shows under ASan or as NaN.
TEST(LinearAttentionMixer, WorkspaceIsEnoughAndOnlyScratch) {
  constexpr size_t kGuard = 4096;
  for (const Case& c : {kGrouped, kUngrouped}) {
    Weights w = make_weights(c, 500);
    const Inputs in = make_inputs(c, 600);
    const size_t n = linear_mixer_workspace_floats(cpu_kernel_table(), c.shape());
    std::vector<float> zeros(n, 0.0f), nans(n + kGuard, std::numeric_limits<float>::quiet_NaN());
    const Results want = run_mixer(c, w, in.h, in.dout, Precision::F32, zeros.data());
    const Results got = run_mixer(c, w, in.h, in.dout, Precision::F32, nans.data());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(0, std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)))
          << result_name(i) << " depends on the workspace's prior contents (S " << c.S << ")";
    size_t touched = 0;
    for (size_t i = n; i < n + kGuard; ++i) touched += !std::isnan(nans[i]);
    EXPECT_EQ(touched, 0u) << "the passes wrote past linear_mixer_workspace_floats (S " << c.S << ")";
  }
}

TEST(LinearAttentionMixer, BadShapeIsAnError) {
  LinearMixerShape s = kGrouped.shape();
  s.la.value_heads = 3;  // not a multiple of 2 key heads
  EXPECT_NE(test::error_of([&] { linear_mixer_workspace_floats(cpu_kernel_table(), s); }).find("v_heads"), std::string::npos);
  s = kGrouped.shape();
  s.la.key_head_dim = 0;
  EXPECT_NE(test::error_of([&] { linear_mixer_workspace_floats(cpu_kernel_table(), s); }).find("linear_key_head_dim"),
            std::string::npos);
}

}  // namespace
}  // namespace lt
