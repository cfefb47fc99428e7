// A malformed tokenizer.json gets an lt::Error that names the file and what is wrong.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/regex.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace lt::data {
namespace {

using nlohmann::json;

// A minimal valid byte-level tokenizer: vocab {a, b, ab}, one merge.
json minimal() {
  return json::parse(R"({
    "version": "1.0", "added_tokens": [], "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "post_processor": null, "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]}
  })");
}

// Expects loading `text` to throw an lt::Error whose message has every fragment.
void expect_error(const std::string& text, std::vector<std::string> fragments) {
  try {
    Tokenizer::from_json_text(text, "bad/tokenizer.json");
    ADD_FAILURE() << "no error for: " << text;
  } catch (const Error& e) {
    fragments.push_back("bad/tokenizer.json");
    for (const auto& f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << "missing \"" << f << "\" in: " << e.what();
  }
}

TEST(TokenizerErrors, MinimalIsValid) {
  Tokenizer t = Tokenizer::from_json_text(minimal().dump(), "ok");
  EXPECT_EQ(t.encode("abab"), (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(t.decode(std::vector<int32_t>{2, 0}), "aba");
}

TEST(TokenizerErrors, BadJson) { expect_error("{\"model\": ", {"not valid JSON"}); }

TEST(TokenizerErrors, NotAnObject) { expect_error("[1, 2]", {"not a JSON object"}); }

TEST(TokenizerErrors, MissingModel) {
  json j = minimal();
  j.erase("model");
  expect_error(j.dump(), {"no \"model\""});
}

TEST(TokenizerErrors, UnknownModelType) {
  json j = minimal();
  j["model"]["type"] = "WordPiece";
  expect_error(j.dump(), {"unsupported tokenizer model type \"WordPiece\""});
}

TEST(TokenizerErrors, MissingVocab) {
  json j = minimal();
  j["model"].erase("vocab");
  expect_error(j.dump(), {"no \"vocab\""});
}

TEST(TokenizerErrors, MergeNamesUnknownToken) {
  json j = minimal();
  j["model"]["merges"].push_back({"a", "zz"});
  expect_error(j.dump(), {"merge 1", "\"zz\"", "not in the vocabulary"});
}

TEST(TokenizerErrors, MergeResultNotInVocab) {
  json j = minimal();
  j["model"]["merges"].push_back("b a");
  expect_error(j.dump(), {"merge 1", "\"ba\"", "not in the vocabulary"});
}

TEST(TokenizerErrors, MalformedMerge) {
  json j = minimal();
  j["model"]["merges"].push_back("a b c");
  expect_error(j.dump(), {"merge 1", "not two tokens"});
  j = minimal();
  j["model"]["merges"].push_back(7);
  expect_error(j.dump(), {"merge 1", "neither"});
}

TEST(TokenizerErrors, UnsupportedPreTokenizer) {
  json j = minimal();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_error(j.dump(), {"pre_tokenizer", "\"Whitespace\""});
}

TEST(TokenizerErrors, BadSplitRegex) {
  json j = minimal();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_error(j.dump(), {"does not compile", "(unclosed"});
}

TEST(TokenizerErrors, UnsupportedNormalizer) {
  json j = minimal();
  j["normalizer"] = {{"type", "Precompiled"}};
  expect_error(j.dump(), {"normalizer", "\"Precompiled\""});
}

TEST(TokenizerErrors, AddedTokenWithoutId) {
  json j = minimal();
  j["added_tokens"].push_back({{"content", "<s>"}});
  expect_error(j.dump(), {"added token 0", "\"id\""});
}

TEST(TokenizerErrors, TemplateNamesUnknownSpecial) {
  json j = minimal();
  j["post_processor"] = json::parse(
      R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
          {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {}})");
  expect_error(j.dump(), {"post_processor", "\"<s>\""});
}

TEST(TokenizerErrors, MissingFile) {
  try {
    Tokenizer::from_file("/nonexistent/dir/tokenizer.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/tokenizer.json"), std::string::npos);
  }
}

TEST(TokenizerBasics, InvalidUtf8InputAndOutput) {
  Tokenizer t = Tokenizer::from_json_text(minimal().dump(), "ok");
  // Bytes outside the tiny vocabulary are dropped (no unk token), as HF does; invalid
  // UTF-8 must not throw.
  EXPECT_EQ(t.encode(std::string("a\xff\xfe" "b")), (std::vector<int32_t>{0, 1}));
}

TEST(TokenizerBasics, LongWhitespaceRunsAreFine) {
  // \s+(?!\S) over a long run is where a JIT stack would overflow; it must still split.
  Regex re("\\s+(?!\\S)|\\s+", "test");
  std::string s(200000, ' ');
  s += "x";
  auto m = re.find_all(s);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].second, 199999u);
}

}  // namespace
}  // namespace lt::data
