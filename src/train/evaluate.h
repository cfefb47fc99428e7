// Exact-match evaluation on GSM8K-format problems: greedy generation from the prompt the
// gsm8k format trains with, scored on the number after "####".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "kernels/cpu/matmul.h"
#include "model/parameters.h"

namespace lt {

struct QaExample {
  std::string question;
  std::string answer;  // ends with "#### N"
};

// Reads {"question": ..., "answer": ...} lines; throws lt::Error naming file:line.
std::vector<QaExample> load_qa_jsonl(const std::string& path);

struct EvalResult {
  double exact_match = 0;
  int64_t examples = 0;
  int64_t correct = 0;
  std::vector<std::string> samples;  // the first few generations, for the log
};

// Prompt ids for a question, exactly as training tokenized the prompt segment.
std::vector<int32_t> qa_prompt_ids(const data::Tokenizer& tok, const std::string& question);

EvalResult evaluate_exact_match(const ModelParameters& params, const data::Tokenizer& tok,
                                const std::vector<QaExample>& examples, Precision precision,
                                int64_t max_new_tokens);

}  // namespace lt
