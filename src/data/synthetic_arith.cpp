#include "data/synthetic_arith.h"

#include <algorithm>
#include <fstream>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/bpe_trainer.h"
#include "data/dataset_format.h"
#include "data/shuffle.h"

namespace lt::data {
namespace {

struct Template {
  const char* text;  // {N} name, {P} pronoun, {O} object, {A} {B} operands
  bool add;
};
constexpr Template kTemplates[] = {
    {"{N} has {A} {O}. {P} gets {B} more. How many {O} does {N} have now?", true},
    {"{N} had {A} {O} and found {B} more. How many {O} does {N} have?", true},
    {"There are {A} {O} in a box. {N} puts in {B} more. How many {O} are in the box?", true},
    {"{N} has {A} {O}. {P} gives {B} away. How many {O} does {N} have left?", false},
    {"{N} had {A} {O} and lost {B}. How many {O} are left?", false},
    {"There are {A} {O} in a box. {N} takes out {B}. How many {O} are in the box?", false},
};
constexpr int kNumTemplates = sizeof(kTemplates) / sizeof(kTemplates[0]);
constexpr const char* kNames[] = {"Tom", "Ann", "Sam", "Mia", "Ben", "Eva", "Leo", "Zoe"};
constexpr const char* kPronouns[] = {"He", "She", "He", "She", "He", "She", "He", "She"};
constexpr int kNumNames = 8;
constexpr const char* kObjects[] = {"apples", "books", "coins", "pens", "cards", "eggs", "cups", "toys"};
constexpr int kNumObjects = 8;

// Fixed salt: split membership must not depend on the generation seed.
constexpr uint64_t kSplitSalt = 0x5eed5eed2024ull;

struct Key {
  int tmpl, name, object, a, b;
  uint64_t packed() const {
    return ((((static_cast<uint64_t>(tmpl) * 64 + name) * 64 + object) * 4096 + a) * 4096) + b;
  }
};

bool valid(const Key& k, int max_operand) {
  if (k.a < 1 || k.b < 1 || k.a > max_operand || k.b > max_operand) return false;
  return kTemplates[k.tmpl].add || k.b <= k.a;
}

bool in_eval(const Key& k, int eval_percent) {
  return splitmix64(k.packed() ^ kSplitSalt) % 100 < static_cast<uint64_t>(eval_percent);
}

std::string fill(const Key& k) {
  std::string out;
  for (const char* p = kTemplates[k.tmpl].text; *p; ++p) {
    if (*p == '{' && p[1] && p[2] == '}') {
      switch (p[1]) {
        case 'N': out += kNames[k.name]; break;
        case 'P': out += kPronouns[k.name]; break;
        case 'O': out += kObjects[k.object]; break;
        case 'A': out += std::to_string(k.a); break;
        case 'B': out += std::to_string(k.b); break;
      }
      p += 2;
    } else {
      out += *p;
    }
  }
  return out;
}

ArithmeticProblem make_problem(const Key& k) {
  ArithmeticProblem p;
  bool add = kTemplates[k.tmpl].add;
  p.result = add ? k.a + k.b : k.a - k.b;
  p.question = fill(k);
  p.answer = std::to_string(k.a) + (add ? " + " : " - ") + std::to_string(k.b) + " = " +
             std::to_string(p.result) + "\n#### " + std::to_string(p.result);
  return p;
}

void check(const ArithmeticTaskOptions& o) {
  if (o.max_operand < 2 || o.max_operand > 4000)
    throw Error("max_operand " + std::to_string(o.max_operand) + " is out of range", "arithmetic task options",
                "use 2..4000");
  if (o.eval_percent < 1 || o.eval_percent > 50)
    throw Error("eval_percent " + std::to_string(o.eval_percent) + " is out of range",
                "arithmetic task options", "use 1..50");
}

}  // namespace

size_t arithmetic_split_size(const ArithmeticTaskOptions& o, ArithmeticSplit split) {
  check(o);
  size_t n = 0;
  for (int t = 0; t < kNumTemplates; ++t)
    for (int name = 0; name < kNumNames; ++name)
      for (int obj = 0; obj < kNumObjects; ++obj)
        for (int a = 1; a <= o.max_operand; ++a)
          for (int b = 1; b <= o.max_operand; ++b) {
            Key k{t, name, obj, a, b};
            if (valid(k, o.max_operand) && in_eval(k, o.eval_percent) == (split == ArithmeticSplit::kEval)) ++n;
          }
  return n;
}

std::vector<ArithmeticProblem> generate_arithmetic_problems(const ArithmeticTaskOptions& o,
                                                            ArithmeticSplit split, size_t count) {
  check(o);
  const bool want_eval = split == ArithmeticSplit::kEval;
  // Rejection sampling is fast while the request is well under the split size; near it,
  // it would crawl, so refuse requests above 80% of the split.
  const size_t available = arithmetic_split_size(o, split);
  if (count * 5 > available * 4)
    throw Error("asked for " + std::to_string(count) + " problems but the " + (want_eval ? "eval" : "train") +
                    " split has " + std::to_string(available) + " (requests are limited to 80% of it)",
                "arithmetic task", "raise max_operand or ask for fewer problems");
  // Separate streams per split, so the eval set does not change with the train size.
  Rng rng(o.seed * 2 + (want_eval ? 1 : 0));
  std::unordered_set<uint64_t> seen;
  std::vector<ArithmeticProblem> out;
  out.reserve(count);
  while (out.size() < count) {
    Key k{static_cast<int>(rng.below(kNumTemplates)), static_cast<int>(rng.below(kNumNames)),
          static_cast<int>(rng.below(kNumObjects)), 1 + static_cast<int>(rng.below(o.max_operand)),
          1 + static_cast<int>(rng.below(o.max_operand))};
    if (!valid(k, o.max_operand) || in_eval(k, o.eval_percent) != want_eval) continue;
    if (!seen.insert(k.packed()).second) continue;
    out.push_back(make_problem(k));
  }
  return out;
}

nlohmann::json synthetic_tokenizer_json(const ArithmeticTaskOptions& options, size_t vocab_size,
                                        bool whole_numbers) {
  // A fixed corpus seed: the tokenizer should not change with the training seed.
  ArithmeticTaskOptions o = options;
  o.seed = 7;
  std::vector<std::string> corpus;
  const size_t n = std::min<size_t>(2000, arithmetic_split_size(o, ArithmeticSplit::kTrain) * 4 / 5);
  for (const auto& p : generate_arithmetic_problems(o, ArithmeticSplit::kTrain, n))
    corpus.push_back(gsm8k_prompt(p.question) + p.answer);
  BpeTrainerOptions bo;
  bo.vocab_size = vocab_size;
  if (whole_numbers) bo.split_pattern = kLlama3SplitPattern;
  return train_byte_level_bpe(corpus, bo);
}

void write_gsm8k_jsonl(const std::string& path, const std::vector<ArithmeticProblem>& problems) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error("cannot create file", path, "check the directory exists and is writable");
  for (const auto& p : problems)
    out << nlohmann::json{{"question", p.question}, {"answer", p.answer}}.dump() << '\n';
  if (!out) throw Error("write failed", path, "check free disk space");
}

}  // namespace lt::data
