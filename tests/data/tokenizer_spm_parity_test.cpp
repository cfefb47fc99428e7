// Parity of lt::data::Tokenizer with HF tokenizers on SentencePiece-style BPE files: the
// reference script trains one small vocabulary with byte tokens <0x00>..<0xFF>,
// byte_fallback and <unk>, and writes it in the structures of Llama 2 (legacy), Mistral
// v0.3 / non-legacy Llama, Gemma and plain Metaspace, plus variants of each option. Every
// encode (with and without special tokens), every decode of those ids (with and without
// skip_special_tokens) and the decodes of random id lists (invalid byte runs among them)
// must equal what HF gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "test_util.h"

namespace lt::data {
namespace {

using nlohmann::json;

json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

std::string show(const std::vector<int32_t>& v) { return json(v).dump(); }

// Counts what was compared; HF's decode panics on a few inputs (its Strip decoder, where
// both cuts cross), which the script records as null and which are left out.
struct Tally {
  int compared = 0, skipped = 0, mismatches = 0;
};

void check_decode(const std::string& got, const json& want, const std::string& what, Tally& t) {
  if (want.is_null()) {
    ++t.skipped;
    return;
  }
  ++t.compared;
  if (got != want.get<std::string>()) {
    if (t.mismatches++ < 8)
      ADD_FAILURE() << what << "\n  decode " << json(got).dump() << "\n  want   " << want.dump();
  }
}

Tally expect_parity(const Tokenizer& tok, const json& corpus, const json& e, const std::string& name) {
  Tally t;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string text = corpus[i];
    const std::string where = name + " string " + std::to_string(i) + " " + json(text).dump();
    const auto want = e["ids"][i].get<std::vector<int32_t>>();
    const auto want_plain = e["ids_no_special"][i].get<std::vector<int32_t>>();
    const auto ids = tok.encode(text, true), plain = tok.encode(text, false);
    t.compared += 2;
    if (ids != want || plain != want_plain) {
      if (t.mismatches++ < 8)
        ADD_FAILURE() << where << "\n  ids   " << show(ids) << "\n  want  " << show(want) << "\n  plain "
                      << show(plain) << "\n  want  " << show(want_plain);
    }
    check_decode(tok.decode(want, false), e["decoded"][i], where + " (decode)", t);
    check_decode(tok.decode(want, true), e["decoded_skip"][i], where + " (decode, skip special)", t);
  }
  for (size_t i = 0; i < e["decode_cases"].size(); ++i) {
    const auto ids = e["decode_cases"][i].get<std::vector<int32_t>>();
    const std::string where = name + " decode case " + std::to_string(i) + " " + show(ids);
    check_decode(tok.decode(ids, false), e["decode_cases_out"][i], where, t);
    check_decode(tok.decode(ids, true), e["decode_cases_skip"][i], where + " (skip special)", t);
  }
  EXPECT_EQ(t.mismatches, 0) << name << ": " << t.mismatches << " of " << t.compared << " results differ";
  return t;
}

TEST(TokenizerParity, SentencePieceStyleStructuresMatchHfTokenizers) {
  test::TempDir dir("tok-spm-parity");
  auto r = test::run_reference_script("data_tokenizer_spm_parity.py", "build '" + dir.str() + "'");
  ASSERT_PYTHON_OK(r);
  const auto corpus = read_json(dir.path() / "corpus.json");
  const auto expected = read_json(dir.path() / "expected.json");
  ASSERT_GE(corpus.size(), 600u);
  const char* names[] = {"metaspace", "mistral", "llama2_legacy", "gemma", "metaspace_first_digits",
                         "metaspace_never_punctuation", "whitespace_split", "whitespace", "affixes",
                         "metaspace_add_prefix_space", "metaspace_no_prefix_space", "mistral_partial_bytes",
                         "mistral_partial_bytes_no_fuse", "llama2_ignore_merges", "llama2_strip_both"};
  Tally all;
  for (const char* name : names) {
    ASSERT_TRUE(expected.contains(name)) << name;
    Tokenizer tok = Tokenizer::from_file((dir.path() / name / "tokenizer.json").string());
    Tally t = expect_parity(tok, corpus, expected[name], name);
    all.compared += t.compared;
    all.skipped += t.skipped;
  }
  std::printf("SentencePiece-style parity: %zu variants, %zu strings each, %d results compared, %d left "
              "out (HF panicked)\n",
              std::size(names), corpus.size(), all.compared, all.skipped);
  EXPECT_LE(all.skipped, 40);

  // The structures differ where they should (so parity above is not parity of one thing).
  auto load = [&](const char* n) { return Tokenizer::from_file((dir.path() / n / "tokenizer.json").string()); };
  Tokenizer mistral = load("mistral"), legacy = load("llama2_legacy"), partial = load("mistral_partial_bytes");
  const int32_t bos = *mistral.token_to_id("<s>");
  ASSERT_EQ(mistral.prefix_ids(), std::vector<int32_t>{bos});
  // A character outside the vocabulary falls back to its UTF-8 bytes (🦀 is F0 9F A6 80),
  // and decodes back whole.
  const auto crab = mistral.encode("\xF0\x9F\xA6\x80", false);
  ASSERT_EQ(crab.size(), 5u);  // "▁" then the four byte tokens
  EXPECT_EQ(mistral.id_to_token(crab[1]), "<0xF0>");
  EXPECT_EQ(mistral.decode(crab), "\xF0\x9F\xA6\x80");
  // Without byte tokens past ASCII it becomes one <unk> (fuse_unk).
  const auto unk = partial.encode("\xF0\x9F\xA6\x80\xF0\x9F\xA6\x80", false);
  EXPECT_EQ(std::count(unk.begin(), unk.end(), *partial.token_to_id("<unk>")), 1);
  // Mistral ("first") prepends "▁" only at the start of the input; legacy Llama 2 also
  // after a special token.
  const auto m = mistral.encode("<s>hi", false), l = legacy.encode("<s>hi", false);
  ASSERT_GE(m.size(), 2u);
  ASSERT_GE(l.size(), 2u);
  EXPECT_NE(mistral.id_to_token(m[1]).rfind("\xE2\x96\x81", 0), 0u);
  EXPECT_EQ(legacy.id_to_token(l[1]).rfind("\xE2\x96\x81", 0), 0u);
}

}  // namespace
}  // namespace lt::data
