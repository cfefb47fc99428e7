// Parity of lt::data::Tokenizer with HF tokenizers: the reference script trains small
// byte-level BPE tokenizers with the Qwen2 and Llama 3 structures (normalizer,
// pre-tokenizer regex, decoder, post-processor, added tokens with every flag), and
// writes the ids and decodes HF gives on a varied corpus; every one must match.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "test_util.h"

namespace lt::data {
namespace {

nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

std::string show(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  s += ']';
  return s;
}

// Compares every corpus string; reports the first few mismatches in full.
void expect_parity(const Tokenizer& tok, const nlohmann::json& corpus, const nlohmann::json& expected,
                   const std::string& name) {
  int reported = 0, mismatches = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string text = corpus[i];
    auto ids = tok.encode(text, true);
    auto plain = tok.encode(text, false);
    auto want = expected["ids"][i].get<std::vector<int32_t>>();
    auto want_plain = expected["ids_no_special"][i].get<std::vector<int32_t>>();
    std::string dec = tok.decode(want, false), dec_skip = tok.decode(want, true);
    bool ok = ids == want && plain == want_plain && dec == expected["decoded"][i].get<std::string>() &&
              dec_skip == expected["decoded_skip"][i].get<std::string>();
    if (!ok) {
      ++mismatches;
      if (reported++ < 5)
        ADD_FAILURE() << name << " string " << i << ": " << nlohmann::json(text).dump() << "\n  ids  "
                      << show(ids) << "\n  want " << show(want) << "\n  plain " << show(plain)
                      << "\n  want  " << show(want_plain) << "\n  decode " << nlohmann::json(dec).dump()
                      << "\n  want   " << expected["decoded"][i].dump() << "\n  skip " << nlohmann::json(dec_skip).dump()
                      << "\n  want " << expected["decoded_skip"][i].dump();
    }
  }
  EXPECT_EQ(mismatches, 0) << name << ": " << mismatches << " of " << corpus.size() << " strings differ";
}

TEST(TokenizerParity, QwenAndLlamaStructuresMatchHfTokenizers) {
  test::TempDir dir("tok-parity");
  auto r = test::run_reference_script("data_tokenizer_parity.py", "build '" + dir.str() + "'");
  ASSERT_PYTHON_OK(r);
  const auto corpus = read_json(dir.path() / "corpus.json");
  const auto expected = read_json(dir.path() / "expected.json");
  ASSERT_GE(corpus.size(), 400u);
  for (const char* name : {"qwen2", "qwen2_string_merges", "llama3", "llama3_string_merges",
                           "llama3_ignore_merges", "gpt2", "gpt2_string_merges"}) {
    ASSERT_TRUE(expected.contains(name)) << name;
    Tokenizer tok = Tokenizer::from_file((dir.path() / name / "tokenizer.json").string());
    expect_parity(tok, corpus, expected[name], name);
  }
  // The structures differ where they should: Qwen2 splits digits one by one, and only
  // Llama 3 prepends <|begin_of_text|>.
  Tokenizer qwen = Tokenizer::from_file((dir.path() / "qwen2" / "tokenizer.json").string());
  Tokenizer llama = Tokenizer::from_file((dir.path() / "llama3" / "tokenizer.json").string());
  EXPECT_EQ(qwen.encode("1234567", false).size(), 7u);
  ASSERT_EQ(llama.prefix_ids().size(), 1u);
  EXPECT_EQ(llama.prefix_ids()[0], *llama.token_to_id("<|begin_of_text|>"));
  EXPECT_TRUE(qwen.prefix_ids().empty());
}

}  // namespace
}  // namespace lt::data
