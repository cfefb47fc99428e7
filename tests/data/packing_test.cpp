// Packing into fixed-length rows: masks at document boundaries, seeded order, and exact
// resume from a saved DataPosition.
#include <gtest/gtest.h>

#include "core/error.h"
#include "data/packing.h"
#include "data/synthetic_arith.h"

namespace lt::data {
namespace {

using nlohmann::json;

const Tokenizer& tok() {
  static const Tokenizer t = Tokenizer::from_json_text(synthetic_tokenizer_json({}).dump(), "test tokenizer");
  return t;
}

Dataset problems(size_t n) {
  std::vector<json> recs;
  for (const auto& p : generate_arithmetic_problems({}, ArithmeticSplit::kTrain, n))
    recs.push_back({{"question", p.question}, {"answer", p.answer}});
  return Dataset::from_records(recs, "synthetic", tok(), {});
}

TEST(Packing, RowsFollowDocumentsWithBoundaryMasks) {
  Dataset d = problems(50);
  LoaderOptions o;
  o.seq_len = 64;
  o.shuffle = false;
  PackedLoader loader(d, o);
  // Concatenating rows must give the documents back in order, each ending with EOS.
  std::vector<int32_t> ids, labels, pos;
  for (int r = 0; r < 40; ++r) {
    PackedRow row = loader.next();
    ASSERT_EQ(row.input_ids.size(), 64u);
    ids.insert(ids.end(), row.input_ids.begin(), row.input_ids.end());
    labels.insert(labels.end(), row.labels.begin(), row.labels.end());
    pos.insert(pos.end(), row.position_ids.begin(), row.position_ids.end());
  }
  size_t at = 0;
  for (size_t doc = 0; doc < d.size() && at + d.ids(doc).size() <= ids.size(); ++doc) {
    auto di = d.ids(doc);
    auto dl = d.labels(doc);
    for (size_t k = 0; k < di.size(); ++k) {
      ASSERT_EQ(ids[at + k], di[k]);
      ASSERT_EQ(labels[at + k], dl[k]);
      ASSERT_EQ(pos[at + k], static_cast<int32_t>(k));
      // Trained positions carry the input id itself (HF alignment; the model shifts).
      if (labels[at + k] != kIgnoreLabel) {
        ASSERT_EQ(labels[at + k], ids[at + k]);
      }
    }
    EXPECT_EQ(labels[at], kIgnoreLabel) << "a document's first token is never a target";
    EXPECT_EQ(di.back(), d.eos_id());
    at += di.size();
  }
  EXPECT_GT(at, 1000u);
}

TEST(Packing, FirstTokenAfterBoundaryIsNeverATarget) {
  // With train_on_prompt every token is trained, so only the boundary rule masks.
  std::vector<json> recs = {{{"text", "aaa"}}, {{"text", "bbbb"}}, {{"text", "cc"}}};
  DatasetOptions all;
  all.train_on_prompt = true;
  Dataset d = Dataset::from_records(recs, "t", tok(), all);
  LoaderOptions o;
  o.seq_len = 8;
  o.shuffle = false;
  PackedLoader loader(d, o);
  PackedRow r = loader.next();
  for (size_t i = 0; i < r.position_ids.size(); ++i) {
    if (r.position_ids[i] == 0)
      EXPECT_EQ(r.labels[i], kIgnoreLabel) << i;
    else
      EXPECT_EQ(r.labels[i], r.input_ids[i]) << i;
  }
}

// document_starts from the loader's positions: each token's document start in its row,
// a continued document starting at the row's first token, padding tokens alone.
TEST(Packing, DocumentStartsFollowThePositions) {
  Dataset d = problems(30);
  LoaderOptions o;
  o.seq_len = 50;
  o.shuffle = false;
  PackedLoader loader(d, o);
  const int64_t rows = 6;
  std::vector<int32_t> ids(rows * 50), labels(ids.size()), pos(ids.size()), ds(ids.size());
  loader.next_batch(rows, ids.data(), labels.data(), pos.data());
  document_starts(ds.data(), pos.data(), rows, 50);
  bool continued = false;
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(ds[r * 50], 0);
    continued |= pos[r * 50] != 0;
    for (int64_t i = 0; i < 50; ++i) {
      const int64_t t = r * 50 + i;
      // The token's position in its document, less what an earlier row held of it.
      if (pos[t] <= i) {
        EXPECT_EQ(ds[t], i - pos[t]) << t;
      } else {
        EXPECT_EQ(ds[t], 0) << t;  // continued from the previous row
      }
      if (pos[t] == 0) {
        EXPECT_EQ(ds[t], i) << t;
      }
    }
  }
  EXPECT_TRUE(continued) << "no document crossed a row: the case tests less than it should";
  const std::vector<int32_t> padded = {0, 1, 2, 0, 0, 0};  // kPad: 3 tokens, 3 pads
  std::vector<int32_t> out(6);
  document_starts(out.data(), padded.data(), 1, 6);
  EXPECT_EQ(out, (std::vector<int32_t>{0, 0, 0, 3, 4, 5}));
}

TEST(Packing, ShuffleIsDeterministicBySeed) {
  Dataset d = problems(200);
  LoaderOptions o;
  o.seq_len = 32;
  o.seed = 42;
  PackedLoader a(d, o), b(d, o);
  o.seed = 43;
  PackedLoader c(d, o);
  bool differs = false;
  for (int i = 0; i < 30; ++i) {
    auto ra = a.next(), rb = b.next(), rc = c.next();
    EXPECT_EQ(ra.input_ids, rb.input_ids);
    differs |= ra.input_ids != rc.input_ids;
  }
  EXPECT_TRUE(differs);
}

TEST(Packing, EpochsReshuffleAndCoverEveryDocument) {
  Dataset d = problems(20);
  LoaderOptions o;
  o.seq_len = 16;
  o.seed = 1;
  PackedLoader l(d, o);
  size_t total = 0;
  for (size_t i = 0; i < d.size(); ++i) total += d.ids(i).size();
  // Exactly one epoch of tokens: every position of every document once.
  std::vector<int32_t> seen;
  while (l.epoch() == 0) {
    auto r = l.next();
    seen.insert(seen.end(), r.input_ids.begin(), r.input_ids.end());
  }
  EXPECT_GE(seen.size(), total);
  EXPECT_LT(seen.size(), total + 16);
  EXPECT_EQ(l.position().epoch, 1u);
}

TEST(Packing, ResumeIsExact) {
  Dataset d = problems(100);
  LoaderOptions o;
  o.seq_len = 48;
  o.seed = 7;
  PackedLoader straight(d, o);
  std::vector<PackedRow> want;
  for (int i = 0; i < 150; ++i) want.push_back(straight.next());  // crosses epochs

  PackedLoader first(d, o);
  for (int i = 0; i < 77; ++i) first.next();
  json saved = first.position().to_json();
  PackedLoader resumed(d, o);
  resumed.set_position(DataPosition::from_json(json::parse(saved.dump())));
  EXPECT_EQ(resumed.position(), first.position());
  for (int i = 77; i < 150; ++i) {
    auto r = resumed.next();
    ASSERT_EQ(r.input_ids, want[i].input_ids) << i;
    ASSERT_EQ(r.labels, want[i].labels) << i;
    ASSERT_EQ(r.position_ids, want[i].position_ids) << i;
  }
}

TEST(Packing, BatchMatchesRows) {
  Dataset d = problems(30);
  LoaderOptions o;
  o.seq_len = 20;
  PackedLoader a(d, o), b(d, o);
  std::vector<int32_t> ids(3 * 20), labels(3 * 20), pos(3 * 20);
  a.next_batch(3, ids.data(), labels.data(), pos.data());
  for (int r = 0; r < 3; ++r) {
    auto row = b.next();
    EXPECT_TRUE(std::equal(row.input_ids.begin(), row.input_ids.end(), ids.begin() + r * 20));
    EXPECT_TRUE(std::equal(row.labels.begin(), row.labels.end(), labels.begin() + r * 20));
  }
}

TEST(Packing, PadModeOneDocumentPerRow) {
  Dataset d = problems(5);
  LoaderOptions o;
  o.seq_len = 128;
  o.shuffle = false;
  o.mode = PackMode::kPad;
  o.pad_id = 0;
  PackedLoader l(d, o);
  for (size_t doc = 0; doc < d.size(); ++doc) {
    auto r = l.next();
    auto di = d.ids(doc);
    ASSERT_LE(di.size(), 128u);
    for (size_t i = 0; i < 128; ++i) {
      if (i < di.size()) {
        EXPECT_EQ(r.input_ids[i], di[i]);
      } else {
        EXPECT_EQ(r.input_ids[i], 0);
        EXPECT_EQ(r.labels[i], kIgnoreLabel);
      }
    }
  }
  o.seq_len = 10;
  PackedLoader t(d, o);
  t.next();
  EXPECT_EQ(t.truncated_documents(), 1u);
}

TEST(Packing, BadPositionsAndOptions) {
  Dataset d = problems(10);
  LoaderOptions o;
  PackedLoader l(d, o);
  EXPECT_THROW(l.set_position({0, 10, 0}), Error);
  EXPECT_THROW(l.set_position({0, 0, 100000}), Error);
  EXPECT_THROW(DataPosition::from_json(json{{"epoch", 0}}), Error);
  EXPECT_THROW(DataPosition::from_json(json{{"epoch", -1}, {"index", 0}, {"offset", 0}}), Error);
  o.seq_len = 1;
  EXPECT_THROW(PackedLoader(d, o), Error);
}

}  // namespace
}  // namespace lt::data
