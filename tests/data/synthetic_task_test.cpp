// The synthetic arithmetic task: deterministic, disjoint splits, GSM8K answers, the
// exact-match scorer, and its small tokenizer (which HF tokenizers must load and agree
// with).
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/dataset_format.h"
#include "data/exact_match.h"
#include "data/synthetic_arith.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace lt::data {
namespace {

TEST(SyntheticTask, DeterministicBySeed) {
  ArithmeticTaskOptions o;
  auto a = generate_arithmetic_problems(o, ArithmeticSplit::kTrain, 200);
  auto b = generate_arithmetic_problems(o, ArithmeticSplit::kTrain, 200);
  ASSERT_EQ(a.size(), 200u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].question, b[i].question);
    EXPECT_EQ(a[i].answer, b[i].answer);
  }
  o.seed = 99;
  auto c = generate_arithmetic_problems(o, ArithmeticSplit::kTrain, 200);
  size_t same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i].question == c[i].question;
  EXPECT_LT(same, 10u);
}

TEST(SyntheticTask, SplitsAreDisjointAndDistinct) {
  ArithmeticTaskOptions o;
  auto train = generate_arithmetic_problems(o, ArithmeticSplit::kTrain, 20000);
  o.seed = 5;  // a different seed for eval must still never overlap
  auto eval = generate_arithmetic_problems(o, ArithmeticSplit::kEval, 2000);
  std::set<std::string> train_q;
  for (const auto& p : train) train_q.insert(p.question);
  EXPECT_EQ(train_q.size(), train.size()) << "train problems repeat";
  std::set<std::string> eval_q;
  for (const auto& p : eval) {
    EXPECT_EQ(train_q.count(p.question), 0u) << p.question;
    eval_q.insert(p.question);
  }
  EXPECT_EQ(eval_q.size(), eval.size());
  EXPECT_GT(arithmetic_split_size(o, ArithmeticSplit::kEval), 5000u);
}

TEST(SyntheticTask, AnswersAreCorrectGsm8k) {
  ArithmeticTaskOptions o;
  for (const auto& p : generate_arithmetic_problems(o, ArithmeticSplit::kEval, 500)) {
    int a = 0, b = 0, c = 0;
    char op = 0;
    ASSERT_EQ(std::sscanf(p.answer.c_str(), "%d %c %d = %d", &a, &op, &b, &c), 4) << p.answer;
    EXPECT_EQ(c, op == '+' ? a + b : a - b);
    EXPECT_EQ(c, p.result);
    EXPECT_GE(c, 0);
    EXPECT_LE(std::max(a, b), o.max_operand);
    EXPECT_EQ(extract_final_answer(p.answer), std::to_string(c));
    // Both operands appear in the question.
    EXPECT_NE(p.question.find(std::to_string(a)), std::string::npos);
    EXPECT_NE(p.question.find(std::to_string(b)), std::string::npos);
  }
}

TEST(SyntheticTask, TooManyProblemsIsAnError) {
  ArithmeticTaskOptions o;
  o.max_operand = 3;
  EXPECT_THROW(generate_arithmetic_problems(o, ArithmeticSplit::kEval, 100000), Error);
}

TEST(ExactMatch, ExtractsTheFinalAnswer) {
  EXPECT_EQ(extract_final_answer("3 + 4 = 7\n#### 7"), "7");
  EXPECT_EQ(extract_final_answer("#### 1,234 apples"), "1234");
  EXPECT_EQ(extract_final_answer("####-5"), "-5");
  EXPECT_EQ(extract_final_answer("#### 12.50"), "12.5");
  EXPECT_EQ(extract_final_answer("#### 12.0"), "12");
  EXPECT_EQ(extract_final_answer("#### 007"), "7");
  EXPECT_EQ(extract_final_answer("#### 0"), "0");
  EXPECT_EQ(extract_final_answer("#### 19<|endoftext|>Question: ... #### 3"), "19");
  EXPECT_FALSE(extract_final_answer("the answer is 7"));
  EXPECT_FALSE(extract_final_answer("#### seven"));
  EXPECT_TRUE(exact_match("12 + 7 = 19\n#### 19\nQuestion", "12 + 7 = 19\n#### 19"));
  EXPECT_FALSE(exact_match("12 + 7 = 19\n#### 18", "#### 19"));
  EXPECT_FALSE(exact_match("#### 190", "#### 19"));
  EXPECT_FALSE(exact_match("", "#### 19"));
  EXPECT_THROW(exact_match("#### 1", "no answer"), Error);
  EXPECT_DOUBLE_EQ(exact_match_rate({"#### 1", "#### 2", "x"}, {"#### 1", "#### 3", "#### 4"}), 1.0 / 3);
}

TEST(SyntheticTask, TokenizerRoundTripsAndKeepsDigitsSingle) {
  ArithmeticTaskOptions o;
  Tokenizer tok = Tokenizer::from_json_text(synthetic_tokenizer_json(o).dump(), "synthetic");
  EXPECT_EQ(tok.vocab_size(), 384);
  auto p = generate_arithmetic_problems(o, ArithmeticSplit::kEval, 50);
  for (const auto& x : p) {
    std::string text = gsm8k_prompt(x.question) + x.answer;
    auto ids = tok.encode(text);
    EXPECT_EQ(tok.decode(ids), text);
    EXPECT_LT(ids.size(), text.size() / 2) << "merges should shorten the text";
  }
  EXPECT_EQ(tok.encode("12345").size(), 5u);
  // The pure byte-level variant (vocab_size 0) has no merges.
  Tokenizer bytes = Tokenizer::from_json_text(synthetic_tokenizer_json(o, 0).dump(), "bytes");
  EXPECT_EQ(bytes.vocab_size(), 259);
  EXPECT_EQ(bytes.encode("Tom has 3").size(), 9u);
}

TEST(SyntheticTask, HfTokenizersLoadsTheBuiltTokenizerAndAgrees) {
  test::TempDir dir("synthetic-tok");
  ArithmeticTaskOptions o;
  const auto tok_json = synthetic_tokenizer_json(o);
  std::ofstream(dir.path() / "tokenizer.json") << tok_json.dump(1);
  nlohmann::json corpus = nlohmann::json::array();
  for (const auto& p : generate_arithmetic_problems(o, ArithmeticSplit::kEval, 100))
    corpus.push_back(gsm8k_prompt(p.question) + p.answer + "<|endoftext|>");
  for (const char* s : {"", " ", "Hello, World! 1234", "<|im_start|>user\nhi<|im_end|>\n", "café 你好 😀",
                        "  multiple   spaces\n\nand lines\t", "It's 3.14"})
    corpus.push_back(s);
  std::ofstream(dir.path() / "corpus.json") << corpus.dump();
  auto r = test::run_reference_script("data_tokenizer_parity.py",
                                      "encode '" + dir.str() + "/tokenizer.json' '" + dir.str() + "/corpus.json' '" +
                                          dir.str() + "/hf.json'");
  ASSERT_PYTHON_OK(r);
  std::ifstream in(dir.path() / "hf.json");
  const auto hf = nlohmann::json::parse(in);
  Tokenizer tok = Tokenizer::from_json_text(tok_json.dump(), "synthetic");
  EXPECT_EQ(hf["vocab_size"].get<int>(), tok.vocab_size());
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string text = corpus[i];
    auto ids = tok.encode(text);
    EXPECT_EQ(ids, hf["ids"][i].get<std::vector<int32_t>>()) << text;
    EXPECT_EQ(tok.decode(ids), hf["decoded"][i].get<std::string>()) << text;
    EXPECT_EQ(tok.decode(ids, true), hf["decoded_skip"][i].get<std::string>()) << text;
  }
}

}  // namespace
}  // namespace lt::data
