// Causal GQA attention: the fp32 kernels of every ISA level this machine can run
// (test::for_each_isa) against the ref:: template run in double, with per-element error
// bounds derived from fp32 rounding (see ErrorBounds); a float64 finite-difference check
// of the backward; bitwise equality across thread counts within each level (never across
// levels: vector width and FMA change the rounding, the bounds cover every level).
#include "kernels/cpu/attention.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "isa_test_util.h"
#include "kernels/attention_bounds.h"
#include "kernels/finite_difference.h"
#include "test_util.h"

namespace lt {
namespace {

using test::attn::error_bounds;
using test::attn::ErrorBounds;
using test::attn::Inputs;
using test::attn::make_inputs;
using test::attn::Shape;

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }
std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

// Worst |got - want| / bound over all elements; > 1 is a failure.
double worst_ratio(const std::vector<float>& got, const std::vector<double>& want,
                   const std::vector<double>& bound, int64_t* where) {
  double worst = 0;
  *where = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]);
    const double r = std::isfinite(err) ? err / (2 * bound[i] + 1e-30) : INFINITY;
    if (r > worst || *where < 0) worst = r, *where = int64_t(i);
  }
  return worst;
}

#define EXPECT_WITHIN_BOUND(name, got, want, bound)                                          \
  do {                                                                                       \
    int64_t at;                                                                              \
    const double r = worst_ratio(got, want, bound, &at);                                     \
    EXPECT_LE(r, 1.0) << name << " " << s.str() << ": worst at " << at << " got " << got[at] \
                      << " want " << want[at] << " bound " << 2 * bound[at];                 \
  } while (0)

const Shape kShapes[] = {
    {2, 65, 4, 4, 16},   // GQA ratio 1, B > 1, a partial second tile
    {1, 130, 6, 2, 64},  // ratio 3, three key tiles, the last with 2 keys
    {2, 7, 8, 2, 80},    // ratio 4, D = 64 + 16
    {1, 1, 4, 1, 33},    // a single token; odd D
    {1, 130, 3, 1, 37},  // odd D over several tiles
    {2, 70, 2, 1, 128},  // two full vectors chunks of D
    {1, 9, 2, 2, 256},
};

TEST(Attention, ForwardMatchesReference) {
  for (const Shape& s : kShapes) {
    const Inputs in = make_inputs(s, 1000 + s.S + s.D);
    const float scale = 1.0f / std::sqrt(float(s.D));
    std::vector<double> ro(s.nq()), rl(s.nl());
    const auto q = to_double(in.q), k = to_double(in.k), v = to_double(in.v);
    ref::attention_forward<double>(ro.data(), rl.data(), q.data(), k.data(), v.data(), s.B, s.S,
                                   s.Hq, s.Hkv, s.D, scale);
    const ErrorBounds e = error_bounds(s, in, ro, rl, scale);
    test::for_each_isa([&](Isa) {
      // NaN-filled outputs: the kernel must overwrite every element.
      std::vector<float> o(s.nq(), NAN), lse(s.nl(), NAN);
      attention_forward(o.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), s.B, s.S, s.Hq,
                        s.Hkv, s.D, scale);
      EXPECT_WITHIN_BOUND("o", o, ro, e.o);
      EXPECT_WITHIN_BOUND("lse", lse, rl, e.lse);
    });
  }
}

TEST(Attention, BackwardMatchesReference) {
  for (const Shape& s : kShapes) {
    const Inputs in = make_inputs(s, 2000 + s.S + s.D);
    const float scale = 0.7f / std::sqrt(float(s.D));  // not 1/sqrt(D): scale must be used
    const auto q = to_double(in.q), k = to_double(in.k), v = to_double(in.v),
               dout = to_double(in.dout);
    // o and lse as the forward saves them: fp32, and the same values for both sides.
    std::vector<double> ro(s.nq()), rl(s.nl());
    ref::attention_forward<double>(ro.data(), rl.data(), q.data(), k.data(), v.data(), s.B, s.S,
                                   s.Hq, s.Hkv, s.D, scale);
    const std::vector<float> of = to_float(ro), lf = to_float(rl);
    const auto o = to_double(of), l = to_double(lf);
    std::vector<double> rdq(s.nq()), rdk(s.nk()), rdv(s.nk());
    ref::attention_backward<double>(rdq.data(), rdk.data(), rdv.data(), dout.data(), q.data(),
                                    k.data(), v.data(), o.data(), l.data(), s.B, s.S, s.Hq, s.Hkv,
                                    s.D, scale);
    const ErrorBounds e = error_bounds(s, in, o, l, scale);
    test::for_each_isa([&](Isa) {
      // NaN-filled outputs: the kernel must overwrite every element.
      std::vector<float> dq(s.nq(), NAN), dk(s.nk(), NAN), dv(s.nk(), NAN);
      attention_backward(dq.data(), dk.data(), dv.data(), in.dout.data(), in.q.data(), in.k.data(),
                         in.v.data(), of.data(), lf.data(), s.B, s.S, s.Hq, s.Hkv, s.D, scale);
      EXPECT_WITHIN_BOUND("dq", dq, rdq, e.dq);
      EXPECT_WITHIN_BOUND("dk", dk, rdk, e.dk);
      EXPECT_WITHIN_BOUND("dv", dv, rdv, e.dv);
    });
  }
}

// The reference backward in double against central differences of the reference
// forward (loss = sum dO * o), and the fp32 kernel's backward against the same
// differences with its derived fp32 bound as the extra allowance.
TEST(Attention, BackwardFiniteDifference) {
  const Shape s{1, 5, 4, 2, 3};
  const double scale = 0.6;
  const Inputs in = make_inputs(s, 77);
  const int64_t nq = s.nq(), nk = s.nk();
  std::vector<double> x(nq + 2 * nk);
  std::copy(in.q.begin(), in.q.end(), x.begin());
  std::copy(in.k.begin(), in.k.end(), x.begin() + nq);
  std::copy(in.v.begin(), in.v.end(), x.begin() + nq + nk);
  const auto dy = to_double(in.dout);
  std::vector<double> lse(s.nl());
  test::fd::Fn f = [&](const std::vector<double>& xx, std::vector<double>& y) {
    ref::attention_forward<double>(y.data(), lse.data(), xx.data(), xx.data() + nq,
                                   xx.data() + nq + nk, s.B, s.S, s.Hq, s.Hkv, s.D, scale);
  };
  std::vector<double> o(nq);
  f(x, o);
  std::vector<double> g(x.size());
  ref::attention_backward<double>(g.data(), g.data() + nq, g.data() + nq + nk, dy.data(), x.data(),
                                  x.data() + nq, x.data() + nq + nk, o.data(), lse.data(), s.B, s.S,
                                  s.Hq, s.Hkv, s.D, scale);
  const auto rep = test::fd::check_gradient(f, x, dy, g);
  EXPECT_TRUE(rep.ok()) << "reference backward: " << rep.str();

  // The fp32 kernels, fed exactly the values the check used (x holds fp32-representable
  // values), with o and lse from their own forward.
  const ErrorBounds e = error_bounds(s, in, o, lse, scale);
  double allow = 0;
  for (const auto* b : {&e.dq, &e.dk, &e.dv})
    for (double v : *b) allow = std::max(allow, 2 * v);
  // o and lse in fp32 perturb delta and p by their own bounds; 4x covers that.
  test::fd::Options opt;
  opt.analytic_abs_err = 4 * allow;
  test::for_each_isa([&](Isa) {
    std::vector<float> of(nq), lf(s.nl()), gf(x.size());
    attention_forward(of.data(), lf.data(), in.q.data(), in.k.data(), in.v.data(), s.B, s.S, s.Hq,
                      s.Hkv, s.D, float(scale));
    attention_backward(gf.data(), gf.data() + nq, gf.data() + nq + nk, in.dout.data(), in.q.data(),
                       in.k.data(), in.v.data(), of.data(), lf.data(), s.B, s.S, s.Hq, s.Hkv, s.D,
                       float(scale));
    const auto rep32 = test::fd::check_gradient(f, x, dy, to_double(gf), opt);
    EXPECT_TRUE(rep32.ok()) << "fp32 kernel backward: " << rep32.str();
  });
}

// Results must not depend on the thread count (nor on the fused / split backward
// schedule it selects: B*Hkv = 1 is fused on 1 thread and split on 2 or 3), within each
// ISA level.
TEST(Attention, BitwiseIdenticalAcrossThreadCounts) {
  const int saved = omp_get_max_threads();
  for (const Shape& s : {Shape{1, 200, 4, 1, 64}, Shape{2, 130, 6, 2, 80}, Shape{3, 67, 2, 2, 19}})
    test::for_each_isa([&](Isa) {
      const Inputs in = make_inputs(s, 5 + s.S);
      const float scale = 1.0f / std::sqrt(float(s.D));
      std::vector<std::vector<float>> first;
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        std::vector<float> o(s.nq()), lse(s.nl()), dq(s.nq()), dk(s.nk()), dv(s.nk());
        attention_forward(o.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), s.B, s.S,
                          s.Hq, s.Hkv, s.D, scale);
        attention_backward(dq.data(), dk.data(), dv.data(), in.dout.data(), in.q.data(),
                           in.k.data(), in.v.data(), o.data(), lse.data(), s.B, s.S, s.Hq, s.Hkv,
                           s.D, scale);
        std::vector<std::vector<float>> all{o, lse, dq, dk, dv};
        if (first.empty()) {
          first = all;
          continue;
        }
        const char* names[] = {"o", "lse", "dq", "dk", "dv"};
        for (size_t t = 0; t < all.size(); ++t)
          EXPECT_EQ(0, std::memcmp(all[t].data(), first[t].data(), all[t].size() * sizeof(float)))
              << names[t] << " differs between 1 and " << threads << " threads, " << s.str();
      }
    });
  omp_set_num_threads(saved);
}

// Fully masked future: changing k, v of later tokens must not change earlier outputs.
TEST(Attention, CausalMaskIgnoresFutureKeys) {
  const Shape s{1, 100, 2, 1, 32};
  const float scale = 0.2f;
  test::for_each_isa([&](Isa) {
    Inputs in = make_inputs(s, 9);
    std::vector<float> o1(s.nq()), l1(s.nl()), o2(s.nq()), l2(s.nl());
    attention_forward(o1.data(), l1.data(), in.q.data(), in.k.data(), in.v.data(), s.B, s.S, s.Hq,
                      s.Hkv, s.D, scale);
    const int64_t cut = 70;  // tokens >= cut get new keys and values
    for (int64_t i = cut * s.Hkv * s.D; i < s.nk(); ++i) in.k[i] += 5.0f, in.v[i] -= 3.0f;
    attention_forward(o2.data(), l2.data(), in.q.data(), in.k.data(), in.v.data(), s.B, s.S, s.Hq,
                      s.Hkv, s.D, scale);
    EXPECT_EQ(0, std::memcmp(o1.data(), o2.data(), cut * s.Hq * s.D * sizeof(float)));
    for (int64_t h = 0; h < s.Hq; ++h)  // lse: [B, Hq, S]
      EXPECT_EQ(0, std::memcmp(l1.data() + h * s.S, l2.data() + h * s.S, cut * sizeof(float)));
  });
}

// The contract's semantics (layouts, GQA head mapping, causal mask, lse, scale) against an
// independent implementation: PyTorch's scaled_dot_product_attention in float64
// (tests/reference/attention_sdpa.py), with the same derived fp32 bounds.
template <typename T>
void write_raw(const std::string& path, const std::vector<T>& v) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(T)));
}
std::vector<double> read_raw(const std::string& path, int64_t n) {
  std::vector<double> v(n);
  std::ifstream f(path, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * sizeof(double)));
  if (f.gcount() != std::streamsize(n * sizeof(double))) v.clear();
  return v;
}

TEST(Attention, MatchesTorchSdpa) {
  const Shape s{2, 70, 6, 2, 40};
  const float scale = 0.17f;
  const Inputs in = make_inputs(s, 31);
  test::TempDir dir("attention-sdpa");
  write_raw(dir.str() + "/q.bin", in.q);
  write_raw(dir.str() + "/k.bin", in.k);
  write_raw(dir.str() + "/v.bin", in.v);
  write_raw(dir.str() + "/dout.bin", in.dout);
  std::ostringstream args;
  args.precision(9);
  args << dir.str() << " " << s.B << " " << s.S << " " << s.Hq << " " << s.Hkv << " " << s.D << " "
       << scale;
  const auto r = test::run_reference_script("attention_sdpa.py", args.str());
  ASSERT_PYTHON_OK(r);
  const auto to = read_raw(dir.str() + "/o.bin", s.nq()),
             tl = read_raw(dir.str() + "/lse.bin", s.nl()),
             tdq = read_raw(dir.str() + "/dq.bin", s.nq()),
             tdk = read_raw(dir.str() + "/dk.bin", s.nk()),
             tdv = read_raw(dir.str() + "/dv.bin", s.nk());
  ASSERT_TRUE(!to.empty() && !tl.empty() && !tdq.empty() && !tdk.empty() && !tdv.empty())
      << "short output from attention_sdpa.py:\n"
      << r.output;

  // The backward here starts from the kernel's own fp32 o and lse, while torch
  // differentiates exactly: their forward bounds enter delta and p, hence 4x as in the
  // finite-difference test.
  const ErrorBounds e = error_bounds(s, in, to, tl, scale);
  auto times4 = [](std::vector<double> v) {
    for (double& x : v) x *= 4;
    return v;
  };
  const auto edq = times4(e.dq), edk = times4(e.dk), edv = times4(e.dv);
  test::for_each_isa([&](Isa) {
    std::vector<float> o(s.nq()), lse(s.nl()), dq(s.nq()), dk(s.nk()), dv(s.nk());
    attention_forward(o.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), s.B, s.S, s.Hq,
                      s.Hkv, s.D, scale);
    attention_backward(dq.data(), dk.data(), dv.data(), in.dout.data(), in.q.data(), in.k.data(),
                       in.v.data(), o.data(), lse.data(), s.B, s.S, s.Hq, s.Hkv, s.D, scale);
    EXPECT_WITHIN_BOUND("o", o, to, e.o);
    EXPECT_WITHIN_BOUND("lse", lse, tl, e.lse);
    EXPECT_WITHIN_BOUND("dq", dq, tdq, edq);
    EXPECT_WITHIN_BOUND("dk", dk, tdk, edk);
    EXPECT_WITHIN_BOUND("dv", dv, tdv, edv);
  });
}

// Documents packed into rows (doc_start, attention.h): query i sees keys doc_start[i]..i.
// The reference runs each document alone as its own sequence (ref:: in double on that
// document's slice of q, k, v, dO), so it shares no masking code with the kernels; the
// bounds are the same derivation per document, with one key tile more for a document
// that starts inside a tile. Layouts: documents of one token, documents ending on and off
// tile edges, one document per row (which must be bitwise the plain causal kernel), many
// short documents in a long row (tiles skipped), GQA ratios 1 to 4.
struct PackedCase {
  Shape s;
  std::vector<std::vector<int64_t>> lengths;  // per row, summing to S
};
const PackedCase kPacked[] = {
    {{2, 150, 4, 2, 32}, {{1, 63, 1, 64, 21}, {5, 7, 100, 38}}},
    {{1, 200, 6, 2, 64}, {{30, 30, 30, 30, 30, 30, 20}}},
    {{2, 70, 2, 1, 128}, {std::vector<int64_t>(70, 1), {69, 1}}},
    {{1, 256, 2, 2, 16}, {{64, 64, 64, 64}}},
    {{1, 130, 8, 2, 40}, {{130}}},
    {{3, 67, 4, 1, 19}, {{66, 1}, {2, 65}, {33, 34}}},
};

struct Doc {
  int64_t b, start, len;
};
std::vector<Doc> docs_of(const PackedCase& c) {
  std::vector<Doc> out;
  for (int64_t b = 0; b < c.s.B; ++b) {
    int64_t at = 0;
    for (int64_t len : c.lengths[b]) out.push_back({b, at, len}), at += len;
    EXPECT_EQ(at, c.s.S) << "row " << b << " of the case does not fill S";
  }
  return out;
}
std::vector<int32_t> doc_starts_of(const PackedCase& c) {
  std::vector<int32_t> ds(c.s.B * c.s.S);
  for (const Doc& d : docs_of(c))
    for (int64_t i = 0; i < d.len; ++i) ds[d.b * c.s.S + d.start + i] = int32_t(d.start);
  return ds;
}

// A document's slice of token-major [B*S, H, D] data (contiguous), and of [B, Hq, S] lse.
template <typename T>
std::vector<T> token_slice(const std::vector<T>& x, const Shape& s, const Doc& d, int64_t H) {
  const auto first = x.begin() + (d.b * s.S + d.start) * H * s.D;
  return {first, first + d.len * H * s.D};
}
template <typename T>
void put_tokens(std::vector<T>& x, const std::vector<T>& part, const Shape& s, const Doc& d, int64_t H) {
  std::copy(part.begin(), part.end(), x.begin() + (d.b * s.S + d.start) * H * s.D);
}
template <typename T>
std::vector<T> lse_slice(const std::vector<T>& l, const Shape& s, const Doc& d) {
  std::vector<T> out(s.Hq * d.len);
  for (int64_t h = 0; h < s.Hq; ++h)
    for (int64_t i = 0; i < d.len; ++i) out[h * d.len + i] = l[(d.b * s.Hq + h) * s.S + d.start + i];
  return out;
}
template <typename T>
void put_lse(std::vector<T>& l, const std::vector<T>& part, const Shape& s, const Doc& d) {
  for (int64_t h = 0; h < s.Hq; ++h)
    for (int64_t i = 0; i < d.len; ++i) l[(d.b * s.Hq + h) * s.S + d.start + i] = part[h * d.len + i];
}

// Each document alone: its reference o, lse (and with dout its dq, dk, dv), and its
// bounds, scattered into the packed layout. o_in / lse_in, when given, are the fp32
// forward values the backward starts from (as the kernels' backward does).
struct PerDocument {
  std::vector<double> o, lse, dq, dk, dv;
  ErrorBounds e;
};
PerDocument per_document(const PackedCase& c, const Inputs& in, double scale, bool backward,
                         const std::vector<float>* o_in = nullptr,
                         const std::vector<float>* lse_in = nullptr) {
  const Shape& s = c.s;
  PerDocument r;
  r.o.resize(s.nq()), r.lse.resize(s.nl()), r.dq.resize(s.nq()), r.dk.resize(s.nk()),
      r.dv.resize(s.nk());
  r.e = ErrorBounds{std::vector<double>(s.nq()), std::vector<double>(s.nl()),
                    std::vector<double>(s.nq()), std::vector<double>(s.nk()),
                    std::vector<double>(s.nk())};
  for (const Doc& d : docs_of(c)) {
    const Shape ds{1, d.len, s.Hq, s.Hkv, s.D};
    const Inputs di{token_slice(in.q, s, d, s.Hq), token_slice(in.k, s, d, s.Hkv),
                    token_slice(in.v, s, d, s.Hkv), token_slice(in.dout, s, d, s.Hq)};
    const auto q = to_double(di.q), k = to_double(di.k), v = to_double(di.v),
               dout = to_double(di.dout);
    std::vector<double> o(ds.nq()), l(ds.nl());
    if (o_in) {
      o = to_double(token_slice(*o_in, s, d, s.Hq));
      l = to_double(lse_slice(*lse_in, s, d));
    } else {
      ref::attention_forward<double>(o.data(), l.data(), q.data(), k.data(), v.data(), 1, d.len,
                                     s.Hq, s.Hkv, s.D, scale);
    }
    // One key tile more than the document's own count: it may start inside a tile.
    const ErrorBounds e = error_bounds(ds, di, o, l, scale, 1);
    put_tokens(r.o, o, s, d, s.Hq);
    put_lse(r.lse, l, s, d);
    put_tokens(r.e.o, e.o, s, d, s.Hq);
    put_lse(r.e.lse, e.lse, s, d);
    if (!backward) continue;
    std::vector<double> dq(ds.nq()), dk(ds.nk()), dv(ds.nk());
    ref::attention_backward<double>(dq.data(), dk.data(), dv.data(), dout.data(), q.data(),
                                    k.data(), v.data(), o.data(), l.data(), 1, d.len, s.Hq, s.Hkv,
                                    s.D, scale);
    put_tokens(r.dq, dq, s, d, s.Hq);
    put_tokens(r.dk, dk, s, d, s.Hkv);
    put_tokens(r.dv, dv, s, d, s.Hkv);
    put_tokens(r.e.dq, e.dq, s, d, s.Hq);
    put_tokens(r.e.dk, e.dk, s, d, s.Hkv);
    put_tokens(r.e.dv, e.dv, s, d, s.Hkv);
  }
  return r;
}

TEST(AttentionDocuments, ForwardMatchesEachDocumentAlone) {
  for (const PackedCase& c : kPacked) {
    const Shape& s = c.s;
    const Inputs in = make_inputs(s, 3000 + s.S + s.D);
    const float scale = 1.0f / std::sqrt(float(s.D));
    const PerDocument want = per_document(c, in, scale, false);
    const std::vector<int32_t> ds = doc_starts_of(c);
    test::for_each_isa([&](Isa) {
      std::vector<float> o(s.nq(), NAN), lse(s.nl(), NAN);
      attention_forward(o.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), s.B, s.S, s.Hq,
                        s.Hkv, s.D, scale, ds.data());
      EXPECT_WITHIN_BOUND("o", o, want.o, want.e.o);
      EXPECT_WITHIN_BOUND("lse", lse, want.lse, want.e.lse);
    });
  }
}

TEST(AttentionDocuments, BackwardMatchesEachDocumentAlone) {
  for (const PackedCase& c : kPacked) {
    const Shape& s = c.s;
    const Inputs in = make_inputs(s, 4000 + s.S + s.D);
    const float scale = 0.7f / std::sqrt(float(s.D));
    // o and lse as a forward saves them (fp32), the same values for both sides.
    const PerDocument fwd = per_document(c, in, scale, false);
    const std::vector<float> of = to_float(fwd.o), lf = to_float(fwd.lse);
    const PerDocument want = per_document(c, in, scale, true, &of, &lf);
    const std::vector<int32_t> ds = doc_starts_of(c);
    test::for_each_isa([&](Isa) {
      std::vector<float> dq(s.nq(), NAN), dk(s.nk(), NAN), dv(s.nk(), NAN);
      attention_backward(dq.data(), dk.data(), dv.data(), in.dout.data(), in.q.data(), in.k.data(),
                         in.v.data(), of.data(), lf.data(), s.B, s.S, s.Hq, s.Hkv, s.D, scale,
                         ds.data());
      EXPECT_WITHIN_BOUND("dq", dq, want.dq, want.e.dq);
      EXPECT_WITHIN_BOUND("dk", dk, want.dk, want.e.dk);
      EXPECT_WITHIN_BOUND("dv", dv, want.dv, want.e.dv);
    });
  }
}

// One document per row (doc_start all 0) makes the same calls as no doc_start: the same
// bits, forward and backward, at every level.
TEST(AttentionDocuments, OneDocumentPerRowIsBitwiseThePlainKernel) {
  for (const Shape& s : kShapes)
    test::for_each_isa([&](Isa) {
      const Inputs in = make_inputs(s, 6000 + s.S);
      const float scale = 1.0f / std::sqrt(float(s.D));
      const std::vector<int32_t> zeros(s.B * s.S, 0);
      std::vector<std::vector<float>> got[2];
      for (int with = 0; with < 2; ++with) {
        const int32_t* ds = with ? zeros.data() : nullptr;
        std::vector<float> o(s.nq()), lse(s.nl()), dq(s.nq()), dk(s.nk()), dv(s.nk());
        attention_forward(o.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), s.B, s.S,
                          s.Hq, s.Hkv, s.D, scale, ds);
        attention_backward(dq.data(), dk.data(), dv.data(), in.dout.data(), in.q.data(),
                           in.k.data(), in.v.data(), o.data(), lse.data(), s.B, s.S, s.Hq, s.Hkv,
                           s.D, scale, ds);
        got[with] = {o, lse, dq, dk, dv};
      }
      for (size_t t = 0; t < got[0].size(); ++t)
        EXPECT_EQ(0, std::memcmp(got[0][t].data(), got[1][t].data(), got[0][t].size() * sizeof(float)))
            << "output " << t << " " << s.str();
    });
}

// A document's outputs and gradients depend on nothing outside it, bit for bit: the
// masked products are exact zeros whatever the other documents hold.
TEST(AttentionDocuments, OtherDocumentsChangeNothing) {
  const PackedCase& c = kPacked[0];
  const Shape& s = c.s;
  const std::vector<int32_t> ds = doc_starts_of(c);
  const Doc changed = docs_of(c)[3];  // row 0, tokens 65..128: a whole key tile
  test::for_each_isa([&](Isa) {
    Inputs in = make_inputs(s, 11);
    const float scale = 0.3f;
    std::vector<std::vector<float>> got[2];
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1) {
        for (int64_t t = changed.start; t < changed.start + changed.len; ++t) {
          for (int64_t x = 0; x < s.Hq * s.D; ++x) in.q[t * s.Hq * s.D + x] *= -2.0f, in.dout[t * s.Hq * s.D + x] += 1.0f;
          for (int64_t x = 0; x < s.Hkv * s.D; ++x) in.k[t * s.Hkv * s.D + x] += 5.0f, in.v[t * s.Hkv * s.D + x] -= 3.0f;
        }
      }
      std::vector<float> o(s.nq()), lse(s.nl()), dq(s.nq()), dk(s.nk()), dv(s.nk());
      attention_forward(o.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), s.B, s.S, s.Hq,
                        s.Hkv, s.D, scale, ds.data());
      attention_backward(dq.data(), dk.data(), dv.data(), in.dout.data(), in.q.data(), in.k.data(),
                         in.v.data(), o.data(), lse.data(), s.B, s.S, s.Hq, s.Hkv, s.D, scale,
                         ds.data());
      got[pass] = {o, lse, dq, dk, dv};
    }
    const char* names[] = {"o", "lse", "dq", "dk", "dv"};
    for (size_t t = 0; t < 5; ++t) {
      const bool is_lse = t == 1;
      const int64_t H = t == 0 || t == 2 ? s.Hq : s.Hkv;
      size_t differ = 0;
      for (size_t i = 0; i < got[0][t].size(); ++i) {
        // The token and row of element i; elements of the changed document may differ.
        const int64_t tok = is_lse ? (int64_t(i) / (s.Hq * s.S)) * s.S + int64_t(i) % s.S
                                   : int64_t(i) / (H * s.D);
        if (tok >= changed.start && tok < changed.start + changed.len) continue;
        differ += std::memcmp(&got[0][t][i], &got[1][t][i], sizeof(float)) != 0;
      }
      EXPECT_EQ(differ, 0u) << names[t] << ": elements outside the changed document moved";
    }
  });
}

// Thread counts (and so the fused and split backward schedules) give the same bits with
// documents too.
TEST(AttentionDocuments, BitwiseIdenticalAcrossThreadCounts) {
  const int saved = omp_get_max_threads();
  for (const PackedCase& c : {kPacked[1], kPacked[0], kPacked[5]})
    test::for_each_isa([&](Isa) {
      const Shape& s = c.s;
      const Inputs in = make_inputs(s, 15 + s.S);
      const float scale = 1.0f / std::sqrt(float(s.D));
      const std::vector<int32_t> ds = doc_starts_of(c);
      std::vector<std::vector<float>> first;
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        std::vector<float> o(s.nq()), lse(s.nl()), dq(s.nq()), dk(s.nk()), dv(s.nk());
        attention_forward(o.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), s.B, s.S,
                          s.Hq, s.Hkv, s.D, scale, ds.data());
        attention_backward(dq.data(), dk.data(), dv.data(), in.dout.data(), in.q.data(),
                           in.k.data(), in.v.data(), o.data(), lse.data(), s.B, s.S, s.Hq, s.Hkv,
                           s.D, scale, ds.data());
        std::vector<std::vector<float>> all{o, lse, dq, dk, dv};
        if (first.empty()) {
          first = all;
          continue;
        }
        for (size_t t = 0; t < all.size(); ++t)
          EXPECT_EQ(0, std::memcmp(all[t].data(), first[t].data(), all[t].size() * sizeof(float)))
              << "output " << t << " differs between 1 and " << threads << " threads, " << s.str();
      }
    });
  omp_set_num_threads(saved);
}

TEST(AttentionDocuments, ValidDocStarts) {
  const std::vector<int32_t> good = {0, 0, 2, 2, 2, 5, 0, 1, 1, 3};  // B = 2, S = 5
  EXPECT_TRUE(valid_doc_starts(good.data(), 1, 5));
  EXPECT_FALSE(valid_doc_starts(good.data(), 2, 5));  // row 1 starts at 5, not 0
  const std::vector<int32_t> two = {0, 0, 2, 2, 2, 0, 1, 1, 3, 3};
  EXPECT_TRUE(valid_doc_starts(two.data(), 2, 5));
  const std::vector<int32_t> back = {0, 1, 0};  // returns to an earlier document
  EXPECT_FALSE(valid_doc_starts(back.data(), 1, 3));
}

// Sliding windows (attention.h's window): query i sees keys max(doc_start, i - W + 1)..i.
// The reference is ref:: in double with the same window (plain loops over each row's
// keys, no tiles), the bounds the derivation above over exactly those keys, with one key
// tile more (a window edge inside a tile). Windows: 1 (each query sees itself only),
// short, on and off the 64-key tile edge, and >= S (full causal); with and without
// documents.
struct WindowCase {
  Shape s;
  std::vector<int64_t> windows;
};
const WindowCase kWindowCases[] = {
    {{1, 200, 6, 2, 64}, {1, 5, 63, 64, 65, 130, 199, 200, 500}},
    {{2, 65, 4, 4, 16}, {1, 2, 64, 65}},
    {{2, 7, 8, 2, 80}, {1, 3, 7}},
    {{1, 130, 3, 1, 37}, {17, 100}},
};
// Documents of lengths 50, 1, 90, rest (or fewer when S is short) in every row.
std::vector<int32_t> some_documents(const Shape& s) {
  std::vector<int32_t> ds(s.B * s.S);
  for (int64_t b = 0; b < s.B; ++b) {
    const int64_t cuts[] = {50, 51, 141};
    int64_t start = 0;
    int ci = 0;
    for (int64_t i = 0; i < s.S; ++i) {
      if (ci < 3 && i == cuts[ci]) start = i, ++ci;
      ds[b * s.S + i] = int32_t(start);
    }
  }
  return ds;
}

void check_window(const Shape& s, int64_t window, const int32_t* ds, uint64_t seed) {
  const Inputs in = make_inputs(s, seed);
  const float scale = 0.8f / std::sqrt(float(s.D));
  const auto q = to_double(in.q), k = to_double(in.k), v = to_double(in.v), dout = to_double(in.dout);
  std::vector<double> ro(s.nq()), rl(s.nl());
  ref::attention_forward<double>(ro.data(), rl.data(), q.data(), k.data(), v.data(), s.B, s.S, s.Hq,
                                 s.Hkv, s.D, scale, ds, window);
  const ErrorBounds ef = error_bounds(s, in, ro, rl, scale, 1, ds, window);
  // The backward from the forward's fp32 outputs, the same values for both sides.
  const std::vector<float> of = to_float(ro), lf = to_float(rl);
  const auto o = to_double(of), l = to_double(lf);
  std::vector<double> rdq(s.nq()), rdk(s.nk()), rdv(s.nk());
  ref::attention_backward<double>(rdq.data(), rdk.data(), rdv.data(), dout.data(), q.data(), k.data(),
                                  v.data(), o.data(), l.data(), s.B, s.S, s.Hq, s.Hkv, s.D, scale, ds,
                                  window);
  const ErrorBounds eb = error_bounds(s, in, o, l, scale, 1, ds, window);
  test::for_each_isa([&](Isa) {
    SCOPED_TRACE("window " + std::to_string(window) + (ds ? " with documents" : ""));
    std::vector<float> fo(s.nq(), NAN), flse(s.nl(), NAN);
    attention_forward(fo.data(), flse.data(), in.q.data(), in.k.data(), in.v.data(), s.B, s.S, s.Hq,
                      s.Hkv, s.D, scale, ds, window);
    EXPECT_WITHIN_BOUND("o", fo, ro, ef.o);
    EXPECT_WITHIN_BOUND("lse", flse, rl, ef.lse);
    std::vector<float> dq(s.nq(), NAN), dk(s.nk(), NAN), dv(s.nk(), NAN);
    attention_backward(dq.data(), dk.data(), dv.data(), in.dout.data(), in.q.data(), in.k.data(),
                       in.v.data(), of.data(), lf.data(), s.B, s.S, s.Hq, s.Hkv, s.D, scale, ds, window);
    EXPECT_WITHIN_BOUND("dq", dq, rdq, eb.dq);
    EXPECT_WITHIN_BOUND("dk", dk, rdk, eb.dk);
    EXPECT_WITHIN_BOUND("dv", dv, rdv, eb.dv);
  });
}

TEST(AttentionWindow, MatchesReference) {
  for (const WindowCase& c : kWindowCases)
    for (int64_t w : c.windows) check_window(c.s, w, nullptr, 3000 + c.s.S + w);
}

TEST(AttentionWindow, WithDocumentsMatchesReference) {
  for (const WindowCase& c : kWindowCases) {
    const std::vector<int32_t> ds = some_documents(c.s);
    for (int64_t w : c.windows) check_window(c.s, w, ds.data(), 4000 + c.s.S + w);
  }
}

// The reference itself: a window of 1 makes each output its own value row, and lse its
// own scaled score (an independent closed form, no softmax code).
TEST(AttentionWindow, ReferenceWindowOneIsTheValueRow) {
  const Shape s{1, 9, 4, 2, 8};
  const Inputs in = make_inputs(s, 91);
  const auto q = to_double(in.q), k = to_double(in.k), v = to_double(in.v);
  std::vector<double> o(s.nq()), l(s.nl());
  ref::attention_forward<double>(o.data(), l.data(), q.data(), k.data(), v.data(), s.B, s.S, s.Hq, s.Hkv,
                                 s.D, 0.5, nullptr, 1);
  for (int64_t i = 0; i < s.S; ++i)
    for (int64_t h = 0; h < s.Hq; ++h) {
      const int64_t hk = h / (s.Hq / s.Hkv);
      double sc = 0;
      for (int64_t d = 0; d < s.D; ++d) {
        EXPECT_EQ(o[(i * s.Hq + h) * s.D + d], v[(i * s.Hkv + hk) * s.D + d]);
        sc += q[(i * s.Hq + h) * s.D + d] * k[(i * s.Hkv + hk) * s.D + d];
      }
      EXPECT_NEAR(l[h * s.S + i], 0.5 * sc, 1e-12);
    }
}

// A window >= S cuts nothing: the very calls of plain causal attention, bit for bit;
// and keys before a query's window do not change its outputs by a bit, even with huge
// values (finite: masked probabilities are exact zeros, and 0 * v is 0 for finite v, the
// micro-kernels' contract, attention_tiles.h).
TEST(AttentionWindow, WideWindowIsBitwiseCausalAndOutsideKeysAreIgnored) {
  const Shape s{2, 130, 4, 2, 32};
  test::for_each_isa([&](Isa) {
    Inputs in = make_inputs(s, 17);
    const float scale = 1.0f / std::sqrt(float(s.D));
    std::vector<float> o1(s.nq()), l1(s.nl()), o2(s.nq()), l2(s.nl());
    attention_forward(o1.data(), l1.data(), in.q.data(), in.k.data(), in.v.data(), s.B, s.S, s.Hq, s.Hkv,
                      s.D, scale);
    attention_forward(o2.data(), l2.data(), in.q.data(), in.k.data(), in.v.data(), s.B, s.S, s.Hq, s.Hkv,
                      s.D, scale, nullptr, s.S);
    EXPECT_EQ(0, std::memcmp(o1.data(), o2.data(), o1.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(l1.data(), l2.data(), l1.size() * sizeof(float)));
    // Window 10: the last query of each row sees keys S-10..S-1; replace keys 0..S-11 of
    // row 0 (the edge tile's masked keys among them) by junk.
    const int64_t W = 10;
    std::vector<float> o(s.nq()), l(s.nl());
    attention_forward(o.data(), l.data(), in.q.data(), in.k.data(), in.v.data(), s.B, s.S, s.Hq, s.Hkv, s.D,
                      scale, nullptr, W);
    Inputs bad = in;
    for (int64_t j = 0; j + W < s.S; ++j)
      for (int64_t x = 0; x < s.Hkv * s.D; ++x) bad.k[j * s.Hkv * s.D + x] = bad.v[j * s.Hkv * s.D + x] = 1e20f;
    std::vector<float> ob(s.nq()), lb(s.nl());
    attention_forward(ob.data(), lb.data(), bad.q.data(), bad.k.data(), bad.v.data(), s.B, s.S, s.Hq, s.Hkv,
                      s.D, scale, nullptr, W);
    const int64_t last = (s.S - 1) * s.Hq * s.D;  // row 0, token S-1, all heads
    EXPECT_EQ(0, std::memcmp(o.data() + last, ob.data() + last, s.Hq * s.D * sizeof(float)));
  });
}

TEST(AttentionWindow, BitwiseIdenticalAcrossThreadCounts) {
  const int saved = omp_get_max_threads();
  const Shape s{2, 200, 4, 2, 32};
  test::for_each_isa([&](Isa) {
    const Inputs in = make_inputs(s, 23);
    const float scale = 1.0f / std::sqrt(float(s.D));
    const std::vector<int32_t> ds = some_documents(s);
    for (const int32_t* doc : {static_cast<const int32_t*>(nullptr), ds.data()}) {
      std::vector<std::vector<float>> first;
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        std::vector<float> o(s.nq()), lse(s.nl()), dq(s.nq()), dk(s.nk()), dv(s.nk());
        attention_forward(o.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), s.B, s.S, s.Hq,
                          s.Hkv, s.D, scale, doc, 70);
        attention_backward(dq.data(), dk.data(), dv.data(), in.dout.data(), in.q.data(), in.k.data(),
                           in.v.data(), o.data(), lse.data(), s.B, s.S, s.Hq, s.Hkv, s.D, scale, doc, 70);
        std::vector<std::vector<float>> all{o, lse, dq, dk, dv};
        if (first.empty()) {
          first = all;
          continue;
        }
        for (size_t t = 0; t < all.size(); ++t)
          EXPECT_EQ(0, std::memcmp(all[t].data(), first[t].data(), all[t].size() * sizeof(float)))
              << "output " << t << " differs between 1 and " << threads << " threads";
      }
    }
  });
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace lt
