// Packed documents through the whole-model step (ModelStep's doc_start): a row of
// documents with block-diagonal attention and per-document RoPE positions must train as
// if each document were a row of its own: the same logits, loss and gradients, up to
// fp32 summation order.
//
// Tolerance (norm-wise relative, in the style of model_parity_test's bf16 derivation):
// the packed and the separate runs compute the same exact function; they round
// differently where a reduction's order or blocking depends on the row layout: the
// attention's online softmax (its key tiles fall elsewhere), the GEMMs (M differs), and
// the weight gradients (sums over the tokens, in another order). Each stage is a
// reduction of at most n terms, so it perturbs its output by at most gamma_n = n u
// relative (u = 2^-24, Higham Thm 3.1), n the longest reduction of the step:
// max(hidden, intermediate, seq, tokens). Stages compose additively with gain <= 1
// (RMSNorm renormalises): logits pass 5 stages per layer (qkv, attention, o, gate/up,
// down) and the head, (5L + 1) gamma_n for each run, 2x that between two runs; a
// gradient runs forward and back through them, twice again.
#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "data/packing.h"
#include "exec/streaming_test_util.h"
#include "io/safetensors.h"
#include "layers/decoder_block.h"
#include "layers/model_step.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/parameters.h"
#include "test_util.h"

namespace lt {
namespace {

double rel_error(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

struct Doc {
  int64_t row, start, len;
};

struct Packed {
  int64_t batch, seq;
  std::vector<Doc> docs;
  std::vector<int32_t> ids, labels, doc_start;
};

// Rows of documents with the given lengths; random tokens; every label a target except
// each document's first (what the loader does: nothing is predicted across a boundary)
// and a few others.
Packed make_packed(const std::vector<std::vector<int64_t>>& rows, int64_t seq, int64_t vocab) {
  Packed p;
  p.batch = int64_t(rows.size());
  p.seq = seq;
  const int64_t T = p.batch * seq;
  std::vector<int32_t> unused;
  test::make_batch(p.ids, unused, T, vocab, 3);
  p.labels.assign(p.ids.begin(), p.ids.end());
  p.doc_start.resize(T);
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t at = 0;
    for (int64_t len : rows[b]) {
      p.docs.push_back({b, at, len});
      for (int64_t i = 0; i < len; ++i) p.doc_start[b * seq + at + i] = int32_t(at);
      p.labels[b * seq + at] = -100;
      at += len;
    }
    EXPECT_EQ(at, seq);
  }
  for (int64_t t = 0; t < T; t += 11) p.labels[t] = -100;
  return p;
}

constexpr double kU = 0x1p-24;

class DocumentMask : public ::testing::TestWithParam<bool> {};  // tied embeddings

TEST_P(DocumentMask, PackedRowTrainsLikeEachDocumentAlone) {
  ModelConfig c = test::streaming_tiny_config(2);
  c.tie_word_embeddings = GetParam();
  // Documents of 1 to 64 tokens, ending on and off the 64-key tiles.
  const Packed p = make_packed({{17, 1, 40, 30, 12}, {64, 35, 1}}, 100, c.vocab_size);
  const int64_t T = p.batch * p.seq, V = c.vocab_size, L = c.num_layers;
  ModelParameters params(c);
  test::init_parameters(params, 5);

  // Packed, with the documents.
  ModelStep packed(c, p.batch, p.seq, Precision::F32);
  ModelParameters g_packed(c);
  g_packed.zero();
  const StepResult rp = packed.forward_backward(params, g_packed, p.ids.data(), p.labels.data(), {}, 0.0f,
                                                p.doc_start.data());
  std::vector<float> logits_packed(T * V);
  packed.forward_logits(logits_packed.data(), params, p.ids.data(), p.doc_start.data());

  // Each document alone, gradients weighted by the packed row's token count.
  ASSERT_GT(rp.predicted_tokens, 0);
  const float scale = 1.0f / float(rp.predicted_tokens);
  ModelParameters g_alone(c);
  g_alone.zero();
  std::vector<float> logits_alone(T * V);
  double loss_sum = 0;
  int64_t predicted = 0;
  for (const Doc& d : p.docs) {
    ModelStep one(c, 1, d.len, Precision::F32);
    const int64_t off = d.row * p.seq + d.start;
    const StepResult r = one.forward_backward(params, g_alone, p.ids.data() + off, p.labels.data() + off, {}, scale);
    loss_sum += r.loss * double(r.predicted_tokens);
    predicted += r.predicted_tokens;
    one.forward_logits(logits_alone.data() + off * V, params, p.ids.data() + off);
  }
  ASSERT_EQ(predicted, rp.predicted_tokens);
  const double loss_alone = loss_sum / double(predicted);

  const double n = double(std::max({c.hidden_size, c.intermediate_size, p.seq, T}));
  const double gamma = n * kU / (1 - n * kU);
  const double logit_tol = 2 * (5 * L + 1) * gamma, grad_tol = 2 * logit_tol;
  const double logit_err = rel_error(logits_packed.data(), logits_alone.data(), T * V);
  const double loss_err = std::fabs(rp.loss - loss_alone) / loss_alone;
  EXPECT_LE(logit_err, logit_tol);
  EXPECT_LE(loss_err, logit_tol) << rp.loss << " vs " << loss_alone;
  double worst = 0;
  for (const WeightSpec& s : params.specs()) {
    const double e = rel_error(g_packed.tensor(s.hf_name), g_alone.tensor(s.hf_name), s.numel());
    EXPECT_LE(e, grad_tol) << s.hf_name;
    worst = std::max(worst, e);
  }

  // The bounds discriminate: without the documents the packed row fails them.
  ModelParameters g_plain(c);
  g_plain.zero();
  const StepResult plain = packed.forward_backward(params, g_plain, p.ids.data(), p.labels.data());
  const double plain_loss_err = std::fabs(plain.loss - loss_alone) / loss_alone;
  const double plain_grad_err = rel_error(g_plain.data(), g_alone.data(), g_plain.numel());
  EXPECT_GT(plain_loss_err, logit_tol);
  EXPECT_GT(plain_grad_err, grad_tol);
  std::printf("[packed vs alone] logits %.3g, loss %.3g, worst gradient %.3g (bounds %.3g, %.3g); without the "
              "documents: loss %.3g, gradients %.3g\n",
              logit_err, loss_err, worst, logit_tol, grad_tol, plain_loss_err, plain_grad_err);
}

INSTANTIATE_TEST_SUITE_P(Tied, DocumentMask, ::testing::Bool());

// The same under the bf16 matmuls the trainer uses by default: a loose check (bf16
// rounding of each matmul's operands, u = 2^-8, model_parity_test's bound) that the
// documents are wired through the bf16 path too.
TEST(DocumentMaskBf16, PackedRowTrainsLikeEachDocumentAlone) {
  const ModelConfig c = test::streaming_tiny_config(2);
  const Packed p = make_packed({{20, 44, 36}}, 100, c.vocab_size);
  ModelParameters params(c);
  test::init_parameters(params, 6);
  ModelStep packed(c, 1, p.seq, Precision::BF16);
  packed.refresh_compute_copy(params);
  ModelParameters g_packed(c), g_alone(c);
  g_packed.zero();
  g_alone.zero();
  const StepResult rp = packed.forward_backward(params, g_packed, p.ids.data(), p.labels.data(), {}, 0.0f,
                                                p.doc_start.data());
  const float scale = 1.0f / float(rp.predicted_tokens);
  double loss_sum = 0;
  for (const Doc& d : p.docs) {
    ModelStep one(c, 1, d.len, Precision::BF16);
    one.refresh_compute_copy(params);
    const StepResult r =
        one.forward_backward(params, g_alone, p.ids.data() + d.start, p.labels.data() + d.start, {}, scale);
    loss_sum += r.loss * double(r.predicted_tokens);
  }
  const double loss_alone = loss_sum / double(rp.predicted_tokens);
  const double bf16_grad_tol = 2 * 2 * (4 * c.num_layers + 1) * 2 * 0x1p-8;
  EXPECT_LE(std::fabs(rp.loss - loss_alone) / loss_alone, bf16_grad_tol / 2);
  EXPECT_LE(rel_error(g_packed.data(), g_alone.data(), g_packed.numel()), bf16_grad_tol);
}

// Against transformers (tests/reference/packed_documents.py): its padding-free path, rows
// of documents with position_ids restarting at each and no attention mask, in float64
// (RoPE, RMSNorm and the loss too), with the script's own check that this equals running
// each document alone. Our fp32 step with the documents against that exact value: one
// run's share of the bound above, (5L + 1) gamma_n, plus one stage per layer for the fp32
// RoPE tables (each entry rounded once from double: u relative): (6L + 1) gamma_n for
// logits and loss, twice that for gradients.
std::vector<double> to_f64(const TensorView& v) {
  std::vector<double> out(v.numel());
  if (v.dtype == DType::F64) {
    std::memcpy(out.data(), v.data, out.size() * sizeof(double));
  } else {
    std::vector<float> f(v.numel());
    convert_to_f32(f.data(), v.data, v.dtype, f.size());
    out.assign(f.begin(), f.end());
  }
  return out;
}
double rel_error64(const float* a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = double(a[i]) - b[i];
    num += d * d;
    den += b[i] * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

TEST(DocumentMaskParity, MatchesTransformersPackedSequences) {
  test::TempDir dir("packed-documents");
  const auto py = test::run_reference_script("packed_documents.py", dir.str());
  ASSERT_PYTHON_OK(py);
  const ModelConfig c = load_model_config(dir.str());
  ModelParameters params(c), grads(c);
  load_parameters(params, dir.str());
  grads.zero();
  SafetensorsFile ref(dir.str() + "/ref.safetensors");
  const TensorView idv = ref.tensor("input_ids");
  const int64_t B = idv.shape[0], S = idv.shape[1], T = B * S, V = c.vocab_size, L = c.num_layers;
  auto i32 = [&](const char* name) {
    const TensorView t = ref.tensor(name);
    const int32_t* p = t.as<const int32_t>();
    return std::vector<int32_t>(p, p + t.numel());
  };
  const std::vector<int32_t> ids = i32("input_ids"), labels = i32("labels"), pos = i32("position_ids");
  std::vector<int32_t> doc_start(T);
  data::document_starts(doc_start.data(), pos.data(), B, S);

  ModelStep step(c, B, S, Precision::F32);
  std::vector<float> logits(T * V);
  step.forward_logits(logits.data(), params, ids.data(), doc_start.data());
  const StepResult r = step.forward_backward(params, grads, ids.data(), labels.data(), {}, 0.0f, doc_start.data());

  const double n = double(std::max({c.hidden_size, c.intermediate_size, S, T}));
  const double gamma = n * kU / (1 - n * kU);
  const double logit_tol = (6 * L + 1) * gamma, grad_tol = 2 * logit_tol;
  const std::vector<double> ref_logits = to_f64(ref.tensor("logits"));
  const double ref_loss = to_f64(ref.tensor("loss"))[0];
  const double logit_err = rel_error64(logits.data(), ref_logits);
  EXPECT_LE(logit_err, logit_tol);
  EXPECT_LE(std::fabs(r.loss - ref_loss) / ref_loss, logit_tol) << r.loss << " vs " << ref_loss;
  double worst = 0;
  for (const WeightSpec& s : params.specs()) {
    const std::vector<double> g = to_f64(ref.tensor("grad." + s.hf_name));
    ASSERT_EQ(int64_t(g.size()), s.numel()) << s.hf_name;
    const double e = rel_error64(grads.tensor(s.hf_name), g);
    EXPECT_LE(e, grad_tol) << s.hf_name;
    worst = std::max(worst, e);
  }
  std::printf("[packed documents vs transformers] logits %.3g, loss %.3g, worst gradient %.3g (bounds %.3g, %.3g)\n",
              logit_err, std::fabs(r.loss - ref_loss) / ref_loss, worst, logit_tol, grad_tol);

  // Without the documents the same rows are far from transformers' packed result.
  std::vector<float> plain(T * V);
  step.forward_logits(plain.data(), params, ids.data());
  EXPECT_GT(rel_error64(plain.data(), ref_logits), 100 * logit_tol);
}

TEST(DocumentMaskErrors, MalformedDocStartsAreAClearError) {
  const ModelConfig c = test::streaming_tiny_config(1);
  ModelParameters params(c), grads(c);
  test::init_parameters(params, 1);
  ModelStep step(c, 1, 6, Precision::F32);
  std::vector<int32_t> ids(6, 1), labels(6, 1);
  const std::vector<int32_t> bad = {0, 0, 1, 1, 4, 4};  // token 2 starts a document at 1
  try {
    step.forward_backward(params, grads, ids.data(), labels.data(), {}, 0.0f, bad.data());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("doc_start[2]"), std::string::npos) << e.what();
  }
  std::vector<int32_t> pos(6);
  const std::vector<int32_t> good = {0, 0, 2, 3, 3, 3};
  document_positions(pos.data(), good.data(), 1, 6);
  EXPECT_EQ(pos, (std::vector<int32_t>{0, 1, 0, 0, 1, 2}));
}

}  // namespace
}  // namespace lt
