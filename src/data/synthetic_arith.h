// The synthetic task that ships with lazytrain: short GSM8K-format word problems over two
// numbers (addition or subtraction), e.g.
//   question: "Mia has 12 pens. She gets 7 more. How many pens does Mia have now?"
//   answer:   "12 + 7 = 19\n#### 19"
// The default training run learns it from scratch on a laptop CPU in minutes, so it is
// kept small on purpose: 6 templates, 8 names, 8 objects, operands 1..max_operand, a
// vocabulary of about 60 characters. The answer first restates the sum, which puts the
// operands right before the result the model must compute.
//
// Splits: whether a problem is train or eval is a fixed property of the problem (a hash
// of template, name, object and operands), so any train set and any eval set are
// disjoint, whatever their seeds and sizes. Within a split, problems are distinct.
// With operands up to 20 the eval problems are new sentences over arithmetic facts the
// train split also contains; they test reading the problem and doing the sum.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lt::data {

enum class ArithmeticSplit { kTrain, kEval };

struct ArithmeticTaskOptions {
  uint64_t seed = 1234;
  int max_operand = 20;   // operands are 1..max_operand; subtraction never goes below 0
  int eval_percent = 10;  // share of all possible problems reserved for eval
};

struct ArithmeticProblem {
  std::string question;
  std::string answer;  // "<a> <op> <b> = <c>\n#### <c>"
  int64_t result = 0;
};

// `count` distinct problems of the split, in a deterministic order for the seed. Throws
// lt::Error when the split has fewer than `count` problems.
std::vector<ArithmeticProblem> generate_arithmetic_problems(const ArithmeticTaskOptions& options,
                                                            ArithmeticSplit split, size_t count);

// Number of distinct problems in a split (for sizing requests).
size_t arithmetic_split_size(const ArithmeticTaskOptions& options, ArithmeticSplit split);

// A small byte-level BPE tokenizer.json for the task (bpe_trainer.h), trained on train
// problems as the gsm8k format renders them. vocab_size 0 gives the pure byte-level one.
// Digits stay single tokens. Special tokens: <|endoftext|> (EOS), <|im_start|>, <|im_end|>.
// whole_numbers: split digits in runs (Llama 3's pattern) so that frequent numbers become
// single tokens, and an answer is one token per number instead of one per digit.
nlohmann::json synthetic_tokenizer_json(const ArithmeticTaskOptions& options, size_t vocab_size = 384,
                                        bool whole_numbers = false);

// Writes problems as GSM8K JSONL: {"question": ..., "answer": ...} per line.
void write_gsm8k_jsonl(const std::string& path, const std::vector<ArithmeticProblem>& problems);

}  // namespace lt::data
