// The fused head + cross-entropy against the plain double reference, with many chunk
// shapes (a tiny max_logit_bytes forces many token and vocabulary chunks), bf16, ignored
// targets, bad input, each at every ISA level this machine runs (test::for_each_isa: the
// softmax loops are dispatched, and oneDNN gets the same cap); and the reference's
// gradient against finite differences.
//
// Error bounds: tests/kernels/cross_entropy_bounds.h derives them (test::xent::expected).
// Two fast runs with different chunkings are each within their bound of the exact value,
// so they differ by at most the sum of the two bounds: that is how far the default
// vocabulary sub-chunk of 16384 rows may move results from the old partition (the whole
// vocabulary when it fit), CrossEntropyOptions{.vocab_chunk = INT64_MAX}.
// The streamed form (StreamedHeadCrossEntropy, a head whose rows arrive in chunks) makes
// the same calls in the same order as the fused one, so the two agree bit for bit.
#include "kernels/cpu/cross_entropy.h"

#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "isa_test_util.h"
#include "kernels/cross_entropy_bounds.h"
#include "kernels/finite_difference.h"
#include "kernels/kernel_test_util.h"

namespace lt {
namespace {

using test::xent::chunk_counts;
using test::xent::Expected;
using test::xent::expected;
using test::xent::make_problem;
using test::xent::Problem;

struct Result {
  double loss = 0;
  std::vector<float> dx, dw;
};

Result run_fast(const Problem& pr, Precision p, const bf16* w_bf16, int64_t max_logit_bytes,
                int64_t vocab_chunk = kCrossEntropyVocabChunk) {
  Result r;
  r.dx.assign(static_cast<size_t>(pr.T * pr.C), 1e30f);  // must be overwritten
  r.dw = pr.dw0;
  r.loss = head_cross_entropy(r.dx.data(), r.dw.data(), pr.x.data(), pr.w.data(), w_bf16,
                              pr.targets.data(), pr.T, pr.C, pr.V, pr.grad_scale, p,
                              CrossEntropyOptions{max_logit_bytes, vocab_chunk});
  return r;
}

void check_against_reference(const Problem& pr, Precision p, bool give_bf16, int64_t bytes,
                             int64_t vocab_chunk = kCrossEntropyVocabChunk) {
  const bool bf = p == Precision::BF16;
  std::vector<bf16> wb;
  if (give_bf16)
    for (float v : pr.w) wb.push_back(f32_to_bf16(v));
  const auto [n_tc, n_vc] = chunk_counts(pr, bytes, p, vocab_chunk);
  const Expected e = expected(pr, bf, n_tc, n_vc);
  const Result r = run_fast(pr, p, wb.empty() ? nullptr : wb.data(), bytes, vocab_chunk);
  const auto ch = cross_entropy_chunks(pr.T, pr.V, CrossEntropyOptions{bytes, vocab_chunk}, p);
  const std::string where = "T=" + std::to_string(pr.T) + " V=" + std::to_string(pr.V) +
                            " chunks " + std::to_string(ch.token_chunk) + "x" +
                            std::to_string(ch.vocab_chunk) + (bf ? " bf16" : " f32");
  EXPECT_NEAR(r.loss, e.loss, e.loss_bound) << where;
  EXPECT_TRUE(test::within_bound(r.dx, e.dx, e.dx_bound)) << "dx " << where;
  EXPECT_TRUE(test::within_bound(r.dw, e.dw, e.dw_bound)) << "dw " << where;
}

TEST(CrossEntropy, MatchesReferenceForManyChunkings) {
  test::for_each_isa([](Isa) {
    const Problem pr = make_problem(37, 24, 101, 1, 5);
    const int64_t f = 4;  // bytes per fp32 logit
    for (int64_t bytes : {int64_t(32) << 20,  // one chunk
                          f * 101 * 10,       // token chunks of 10, whole vocabulary
                          f * 300})           // 37 tokens x 8 vocabulary (ragged last chunk)
      check_against_reference(pr, Precision::F32, false, bytes);
    // No ignored targets: chunks are contiguous token runs (no gather, dx written directly).
    const Problem contiguous = make_problem(37, 24, 101, 9, 0);
    check_against_reference(contiguous, Precision::F32, false, f * 101 * 10);
    check_against_reference(contiguous, Precision::BF16, false, 6 * 101 * 10);
    // Rows long enough for the vector loops' main bodies, and chunks big enough to thread.
    const Problem wide = make_problem(64, 16, 1000, 11, 7);
    check_against_reference(wide, Precision::F32, false, int64_t(32) << 20);
    check_against_reference(wide, Precision::BF16, false, int64_t(32) << 20);
    // Hundreds of tiny chunks, each four oneDNN calls, on a smaller problem and one thread:
    // on a shared 2-vCPU host every 2-thread call can stall for a scheduler tick, and the
    // chunking logic does not depend on the thread count.
    test::ScopedThreads one(1);
    const Problem small = make_problem(13, 8, 11, 10, 4);
    check_against_reference(small, Precision::F32, false, f * 5);  // 5 tokens x 1 entry
    check_against_reference(small, Precision::F32, false, f);      // one logit at a time
  });
}

TEST(CrossEntropy, ChunkedEqualsUnchunkedUpToRounding) {
  test::ScopedThreads one(1);  // many tiny oneDNN calls: see MatchesReferenceForManyChunkings
  const Problem pr = make_problem(53, 19, 27, 2, 4);
  const int64_t tiny = 4 * 90;  // chunks of 53 tokens x 1 entry: 27 vocabulary chunks
  const Result a = run_fast(pr, Precision::F32, nullptr, int64_t(32) << 20);
  const Result b = run_fast(pr, Precision::F32, nullptr, tiny);
  const auto [n_tc, n_vc] = chunk_counts(pr, tiny, Precision::F32);
  const Expected ea = expected(pr, false, 1, 1), eb = expected(pr, false, n_tc, n_vc);
  EXPECT_NEAR(a.loss, b.loss, ea.loss_bound + eb.loss_bound);
  auto sum = [](std::vector<double> u, const std::vector<double>& v) {
    for (size_t i = 0; i < u.size(); ++i) u[i] += v[i];
    return u;
  };
  EXPECT_TRUE(test::within_bound(b.dx, test::to_double(a.dx), sum(ea.dx_bound, eb.dx_bound)));
  EXPECT_TRUE(test::within_bound(b.dw, test::to_double(a.dw), sum(ea.dw_bound, eb.dw_bound)));
}

// The default sub-chunk against the old partition (the whole vocabulary in one chunk, as
// before sub-chunks were fixed): both within their bounds of the exact value, so within
// the sum of the bounds of each other; and not the same bits (the order did change).
TEST(CrossEntropy, SubChunksAgreeWithTheOldPartitionWithinBounds) {
  const Problem pr = make_problem(40, 16, 2 * kCrossEntropyVocabChunk + 904, 21, 6);
  const int64_t bytes = int64_t(32) << 20;
  for (Precision p : {Precision::F32, Precision::BF16}) {
    const bool bf = p == Precision::BF16;
    const auto [tc_new, vc_new] = chunk_counts(pr, bytes, p);
    const auto [tc_old, vc_old] = chunk_counts(pr, bytes, p, INT64_MAX);
    ASSERT_EQ(vc_new, 3);
    ASSERT_EQ(vc_old, 1);
    check_against_reference(pr, p, false, bytes);
    check_against_reference(pr, p, false, bytes, INT64_MAX);
    const Result a = run_fast(pr, p, nullptr, bytes), b = run_fast(pr, p, nullptr, bytes, INT64_MAX);
    const Expected ea = expected(pr, bf, tc_new, vc_new), eb = expected(pr, bf, tc_old, vc_old);
    EXPECT_NEAR(a.loss, b.loss, ea.loss_bound + eb.loss_bound);
    auto sum = [](std::vector<double> u, const std::vector<double>& v) {
      for (size_t i = 0; i < u.size(); ++i) u[i] += v[i];
      return u;
    };
    EXPECT_TRUE(test::within_bound(a.dx, test::to_double(b.dx), sum(ea.dx_bound, eb.dx_bound)));
    EXPECT_TRUE(test::within_bound(a.dw, test::to_double(b.dw), sum(ea.dw_bound, eb.dw_bound)));
    EXPECT_NE(a.dx, b.dx) << "the partitions should sum dx in different orders";
  }
}

// A head whose rows arrive in chunks: forward() over every chunk, then backward() over
// every chunk, gives the fused call's loss, dx and dw bit for bit, for chunk lengths that
// are one or several sub-chunks (the last one ragged), with and without ignored tokens
// (gathered chunks), with logits kept or recomputed (a small max_logit_bytes), fp32 and
// bf16 (bf16 rows given, or rounded per chunk), at every ISA level.
TEST(CrossEntropy, StreamedChunksEqualTheFusedCallBitwise) {
  test::for_each_isa([](Isa) {
    test::ScopedThreads one(1);  // many small oneDNN calls: see MatchesReferenceForManyChunkings
    const int64_t sub = 16;
    for (int ignore_every : {0, 3}) {
      // 300 tokens: three token chunks of up to 128 under the budgets below.
      const Problem pr = make_problem(300, 12, 5 * sub + 7, 30 + ignore_every, ignore_every);
      std::vector<bf16> wb;
      for (float v : pr.w) wb.push_back(f32_to_bf16(v));
      for (Precision p : {Precision::F32, Precision::BF16})
        for (bool give_bf16 : {false, true}) {
          if (give_bf16 && p != Precision::BF16) continue;
          const bf16* w16 = give_bf16 ? wb.data() : nullptr;
          const int64_t grad = p == Precision::BF16 ? 2 : 0;  // a logit's bf16 gradient
          // 128 tokens of the whole vocabulary's logits (kept) and one sub-chunk's gradient,
          // or of one sub-chunk's logits and gradient (recomputed).
          const int64_t kept = 128 * (4 * pr.V + grad * sub);
          for (int64_t bytes : {kept, (4 + grad) * 128 * sub}) {
            const CrossEntropyOptions opt{bytes, sub};
            const CrossEntropyChunks ch = cross_entropy_chunks(pr.T, pr.V, opt, p);
            ASSERT_EQ(ch.vocab_chunk, sub);
            ASSERT_EQ(ch.token_chunk, 128);
            ASSERT_EQ(ch.keep_logits, bytes == kept);
            const Result fused = run_fast(pr, p, w16, bytes, sub);
            for (int64_t rows : {sub, 2 * sub, 4 * sub}) {
              SCOPED_TRACE("chunks of " + std::to_string(rows) + " rows, budget " + std::to_string(bytes) +
                           (p == Precision::BF16 ? " bf16" : " f32") + (give_bf16 ? " given" : ""));
              StreamedHeadCrossEntropy ce(pr.x.data(), pr.targets.data(), pr.T, pr.C, pr.V, pr.grad_scale, p, opt);
              EXPECT_EQ(ce.vocab_chunk(), sub);
              for (int64_t v0 = 0; v0 < pr.V; v0 += rows)
                ce.forward(pr.w.data() + v0 * pr.C, w16 ? w16 + v0 * pr.C : nullptr, v0, std::min(rows, pr.V - v0));
              const double loss = ce.loss();
              std::vector<float> dx(size_t(pr.T * pr.C), 1e30f), dw = pr.dw0;
              for (int64_t v0 = 0; v0 < pr.V; v0 += rows) {
                // The chunk's gradient rows in their own buffer, as the executor's slots.
                const int64_t nv = std::min(rows, pr.V - v0);
                std::vector<float> chunk(dw.begin() + v0 * pr.C, dw.begin() + (v0 + nv) * pr.C);
                ce.backward(dx.data(), chunk.data(), pr.w.data() + v0 * pr.C, w16 ? w16 + v0 * pr.C : nullptr, v0, nv);
                std::copy(chunk.begin(), chunk.end(), dw.begin() + v0 * pr.C);
              }
              EXPECT_EQ(std::memcmp(&loss, &fused.loss, sizeof loss), 0) << loss << " vs " << fused.loss;
              EXPECT_EQ(std::memcmp(dx.data(), fused.dx.data(), dx.size() * sizeof(float)), 0) << "dx";
              EXPECT_EQ(std::memcmp(dw.data(), fused.dw.data(), dw.size() * sizeof(float)), 0) << "dw";
            }
          }
        }
    }
  });
}

TEST(CrossEntropy, Bf16MatchesReferenceOnRoundedValues) {
  // Both bf16 paths: the widened one rounds the gradient in place in the logits, the
  // native one writes its bf16 copy (at the levels below avx512 both widen).
  test::for_each_isa([](Isa) {
    for (Bf16GemmPath path : {Bf16GemmPath::Widened, Bf16GemmPath::Native}) {
      SCOPED_TRACE(path == Bf16GemmPath::Widened ? "widened" : "native");
      set_bf16_gemm_path(path);
      const Problem pr = make_problem(29, 40, 67, 3, 3);
      check_against_reference(pr, Precision::BF16, false, int64_t(32) << 20);
      check_against_reference(pr, Precision::BF16, true, int64_t(32) << 20);
      check_against_reference(pr, Precision::BF16, true, 6 * 10 * 9);  // 10 tokens x 9 entries
      check_against_reference(pr, Precision::BF16, false, 6);          // one logit at a time
      set_bf16_gemm_path(std::nullopt);
    }
  });
}

TEST(CrossEntropy, EdgeCases) {
  test::for_each_isa([](Isa) {
    // T = 1, odd C; every target ignored (loss 0, dx 0, dw untouched).
    check_against_reference(make_problem(1, 7, 5, 4, 0), Precision::F32, false, 1 << 20);
    Problem pr = make_problem(6, 3, 4, 5, 0);
    for (auto& t : pr.targets) t = kIgnoreIndex;
    const Result r = run_fast(pr, Precision::F32, nullptr, 4 * 8);
    EXPECT_EQ(r.loss, 0.0);
    for (float v : r.dx) EXPECT_EQ(v, 0.0f);
    EXPECT_EQ(r.dw, pr.dw0);
    // Loss alone (no gradient) is the same loss.
    const Problem q = make_problem(11, 8, 9, 6, 3);
    const Result full = run_fast(q, Precision::F32, nullptr, 1 << 20);
    const double loss_only = head_cross_entropy(nullptr, nullptr, q.x.data(), q.w.data(), nullptr,
                                                q.targets.data(), q.T, q.C, q.V, 1.0f,
                                                Precision::F32);
    EXPECT_EQ(loss_only, full.loss);
  });
}

TEST(CrossEntropy, BadInputThrows) {
  Problem pr = make_problem(4, 3, 5, 7, 0);
  std::vector<float> dx(12);
  pr.targets[2] = 5;  // == V
  EXPECT_THROW(head_cross_entropy(dx.data(), nullptr, pr.x.data(), pr.w.data(), nullptr,
                                  pr.targets.data(), 4, 3, 5, 1.0f, Precision::F32),
               Error);
  pr.targets[2] = -1;  // negative but not the ignore index
  EXPECT_THROW(head_cross_entropy(dx.data(), nullptr, pr.x.data(), pr.w.data(), nullptr,
                                  pr.targets.data(), 4, 3, 5, 1.0f, Precision::F32),
               Error);
  pr.targets[2] = 0;
  EXPECT_THROW(head_cross_entropy(dx.data(), nullptr, pr.x.data(), pr.w.data(), nullptr,
                                  pr.targets.data(), 4, 3, 5, 1.0f, Precision::F32,
                                  CrossEntropyOptions{3}),
               Error);
  EXPECT_THROW(head_cross_entropy(dx.data(), nullptr, pr.x.data(), pr.w.data(), nullptr,
                                  pr.targets.data(), 4, 3, 5, 1.0f, Precision::BF16,
                                  CrossEntropyOptions{5}),
               Error);
  EXPECT_THROW(head_cross_entropy(dx.data(), nullptr, pr.x.data(), pr.w.data(), nullptr,
                                  pr.targets.data(), 4, 3, 5, 1.0f, Precision::F32,
                                  CrossEntropyOptions{1 << 20, 0}),
               Error);
}

TEST(CrossEntropy, ReferenceGradientMatchesFiniteDifferences) {
  const int64_t T = 4, C = 3, V = 6;
  const std::vector<int32_t> targets = {2, kIgnoreIndex, 5, 0};
  auto in = test::fd::random_vector(static_cast<size_t>(T * C + V * C), 13, -2, 2);  // [x | w]
  const std::vector<double> dy = {0.7};  // L = 0.7 * loss: grad_scale 0.7
  std::vector<double> g(in.size(), 0.0);
  ref::head_cross_entropy<double>(g.data(), g.data() + T * C, in.data(), in.data() + T * C,
                                  targets.data(), T, C, V, dy[0]);
  auto f = [&](const std::vector<double>& v, std::vector<double>& y) {
    y[0] = ref::head_cross_entropy<double>(nullptr, nullptr, v.data(), v.data() + T * C,
                                           targets.data(), T, C, V, 1.0);
  };
  auto r = test::fd::check_gradient(f, in, dy, g);
  EXPECT_TRUE(r.ok()) << r.str();
}

}  // namespace
}  // namespace lt
