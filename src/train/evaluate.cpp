#include "train/evaluate.h"

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/dataset_format.h"
#include "data/exact_match.h"
#include "data/jsonl_dataset.h"
#include "layers/generator.h"

namespace lt {

std::vector<QaExample> load_qa_jsonl(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error("cannot open the evaluation file", path, "check the path");
  std::vector<QaExample> out;
  std::string line;
  for (int64_t n = 1; std::getline(f, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(n);
    try {
      const auto j = nlohmann::json::parse(line);
      out.push_back({j.at("question").get<std::string>(), j.at("answer").get<std::string>()});
    } catch (const nlohmann::json::exception& e) {
      throw Error("not a {\"question\", \"answer\"} record: " + std::string(e.what()), where,
                  "evaluation data must be GSM8K-format JSONL");
    }
  }
  return out;
}

std::vector<int32_t> qa_prompt_ids(const data::Tokenizer& tok, const std::string& question) {
  std::vector<int32_t> ids = tok.prefix_ids();
  for (int32_t id : tok.encode(data::gsm8k_prompt(question), /*add_special_tokens=*/false)) ids.push_back(id);
  return ids;
}

EvalResult evaluate_exact_match(const ModelParameters& params, const data::Tokenizer& tok,
                                const std::vector<QaExample>& examples, Precision precision,
                                int64_t max_new_tokens) {
  EvalResult r;
  if (examples.empty()) return r;
  const ModelConfig& c = params.config();
  const int32_t eos = data::resolve_eos_id(tok, "");
  Generator gen(c, c.max_position_embeddings, precision);
  gen.refresh_compute_copy(params);
  for (const QaExample& ex : examples) {
    const std::vector<int32_t> prompt = qa_prompt_ids(tok, ex.question);
    const int64_t room = c.max_position_embeddings - static_cast<int64_t>(prompt.size());
    std::string text;
    if (room > 0) {
      const std::vector<int32_t> out = gen.generate(params, prompt, std::min(room, max_new_tokens), {eos});
      text = tok.decode(out, /*skip_special_tokens=*/true);
    }
    const bool ok = data::exact_match(text, ex.answer);
    r.correct += ok;
    ++r.examples;
    if (r.samples.size() < 3) {
      std::string shown = text;  // one line per sample in the log
      for (size_t i = 0; (i = shown.find('\n', i)) != std::string::npos;) shown.replace(i, 1, "\\n");
      r.samples.push_back(ex.question + " -> " + shown + (ok ? "  [correct]" : "  [wrong]"));
    }
  }
  r.exact_match = static_cast<double>(r.correct) / static_cast<double>(r.examples);
  return r;
}

}  // namespace lt
