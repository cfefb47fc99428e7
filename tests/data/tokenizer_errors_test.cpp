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
  j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  expect_error(j.dump(), {"pre_tokenizer", "\"BertPreTokenizer\"", "Metaspace"});
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

// A minimal SentencePiece-style tokenizer: Metaspace, byte tokens for "A" and 0xC3 0xA9 ("é").
json minimal_spm() {
  return json::parse(R"({
    "added_tokens": [], "normalizer": null, "post_processor": null,
    "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
              "vocab": {"<unk>": 0, "<0x41>": 1, "<0xC3>": 2, "<0xA9>": 3, "▁": 4, "a": 5, "▁a": 6},
              "merges": [["▁", "a"]]}
  })");
}

TEST(TokenizerErrors, MinimalSentencePieceIsValid) {
  Tokenizer t = Tokenizer::from_json_text(minimal_spm().dump(), "ok");
  // "é" has no token, so its two bytes stand in; "b" has neither, so <unk>.
  EXPECT_EQ(t.encode("a é bb"), (std::vector<int32_t>{6, 4, 2, 3, 4, 0}));
  EXPECT_EQ(t.decode(std::vector<int32_t>{6, 4, 2, 3}), "a \xC3\xA9");
  // A byte run that is not UTF-8 gives one U+FFFD per byte token, as HF.
  EXPECT_EQ(t.decode(std::vector<int32_t>{2, 1}), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(TokenizerErrors, UnsupportedDecoder) {
  json j = minimal_spm();
  j["decoder"]["decoders"].push_back({{"type", "CTC"}});
  expect_error(j.dump(), {"decoder", "\"CTC\"", "ByteFallback"});
}

TEST(TokenizerErrors, MetaspaceFields) {
  json j = minimal_spm();
  j["pre_tokenizer"]["replacement"] = "ab";
  expect_error(j.dump(), {"pre_tokenizer Metaspace", "\"replacement\"", "exactly one character"});
  j = minimal_spm();
  j["pre_tokenizer"]["prepend_scheme"] = "sometimes";
  expect_error(j.dump(), {"pre_tokenizer Metaspace", "\"sometimes\"", "\"first\""});
  j = minimal_spm();
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Metaspace"}, {"split", "yes"}}}}};
  expect_error(j.dump(), {"pre_tokenizer Metaspace", "\"split\"", "true or false"});
  // add_prefix_space false contradicts prepend_scheme (default "always"); HF rejects it too.
  j = minimal_spm();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}, {"add_prefix_space", false}};
  expect_error(j.dump(), {"add_prefix_space", "\"never\""});
  j = minimal_spm();
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", 5}};
  expect_error(j.dump(), {"decoder Metaspace", "\"replacement\"", "string"});
}

TEST(TokenizerErrors, DecoderFields) {
  json j = minimal_spm();
  j["decoder"]["decoders"][3]["start"] = -1;
  expect_error(j.dump(), {"decoder Strip", "\"start\"", "whole number"});
  j = minimal_spm();
  j["decoder"]["decoders"][3].erase("content");
  expect_error(j.dump(), {"decoder Strip", "\"content\""});
  j = minimal_spm();
  j["decoder"]["decoders"][0]["pattern"] = "▁";
  expect_error(j.dump(), {"decoder Replace", "\"pattern\"", "\"String\""});
}

TEST(TokenizerErrors, BpeOptionFields) {
  json j = minimal_spm();
  j["model"]["byte_fallback"] = "yes";
  expect_error(j.dump(), {"model", "\"byte_fallback\"", "true or false"});
  j = minimal_spm();
  j["model"]["fuse_unk"] = 1;
  expect_error(j.dump(), {"model", "\"fuse_unk\""});
  j = minimal_spm();
  j["model"]["dropout"] = 0.1;
  expect_error(j.dump(), {"model", "dropout", "null"});
  j = minimal_spm();
  j["model"]["dropout"] = "none";
  expect_error(j.dump(), {"model", "\"dropout\"", "[0, 1]"});
  j = minimal_spm();
  j["model"]["unk_token"] = "<missing>";
  expect_error(j.dump(), {"model", "\"<missing>\"", "not in the vocabulary"});
  j = minimal_spm();
  j["model"]["continuing_subword_prefix"] = 3;
  expect_error(j.dump(), {"model", "\"continuing_subword_prefix\"", "string"});
}

TEST(TokenizerErrors, SplitAndNormalizerFields) {
  json j = minimal_spm();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}};
  expect_error(j.dump(), {"pre_tokenizer Split", "\"Sideways\"", "MergedWithPrevious"});
  j = minimal_spm();
  j["pre_tokenizer"] = {{"type", "Punctuation"}, {"behavior", 3}};
  expect_error(j.dump(), {"pre_tokenizer Punctuation", "\"behavior\""});
  j = minimal_spm();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}}}}};
  expect_error(j.dump(), {"normalizer Prepend", "\"prepend\""});
  j = minimal_spm();
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", 7}};
  expect_error(j.dump(), {"normalizer Replace", "\"content\"", "string"});
}

TEST(TokenizerBasics, StripWhereHfPanics) {
  // HF's Strip decoder panics when its two cuts cross (a token of only the stripped
  // character with start and stop both set); lazytrain gives the empty string.
  json j = minimal_spm();
  j["decoder"] = {{"type", "Strip"}, {"content", "▁"}, {"start", 1}, {"stop", 1}};
  Tokenizer t = Tokenizer::from_json_text(j.dump(), "ok");
  EXPECT_EQ(t.decode(std::vector<int32_t>{4}), "");
  EXPECT_EQ(t.decode(std::vector<int32_t>{4, 4}), "");
  EXPECT_EQ(t.decode(std::vector<int32_t>{6}), "a");
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
