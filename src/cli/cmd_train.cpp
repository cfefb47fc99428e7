// `lazytrain train`, `lazytrain eval` and `lazytrain generate`.
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "data/jsonl_dataset.h"
#include "data/synthetic_arith.h"
#include "data/tokenizer.h"
#include "dist/communicator.h"
#include "layers/generator.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "train/evaluate.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace lt::cli {

namespace {

Precision parse_precision(const std::string& p) {
  if (p == "bf16") return Precision::BF16;
  if (p == "f32") return Precision::F32;
  throw Error("unknown precision '" + p + "'", "--precision", "use bf16 or f32");
}

struct ModelRun {
  ModelConfig config;
  std::unique_ptr<ModelParameters> params;
  std::unique_ptr<data::Tokenizer> tokenizer;
};

ModelRun load_model_dir(const std::string& dir) {
  ModelRun m;
  check_model_dir(dir, "--model");
  m.config = load_model_config(dir);
  m.params = std::make_unique<ModelParameters>(m.config);
  load_parameters(*m.params, dir);
  m.tokenizer = std::make_unique<data::Tokenizer>(data::Tokenizer::from_file(dir + "/tokenizer.json"));
  return m;
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto parsed = std::make_shared<TrainConfig>();
  auto config_file = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("train",
                                 "Train or fine-tune a model (no arguments: the embedded default, a small model "
                                 "learning synthetic arithmetic word problems from scratch)");
  cmd->add_option("--config", *config_file, "YAML file of the keys below; flags override it");
  add_train_flags(*cmd, *parsed);
  cmd->callback([cmd, parsed, config_file] {
    TrainConfig run;
    if (!config_file->empty()) apply_yaml_config(run, *config_file);
    apply_given_flags(run, *parsed, *cmd);
    Communicator comm;  // the ranks when mpirun started this process, else one
    if (comm.size() == 1) {
      run_training(run, &comm);
      return;
    }
    // Rank 0 prints; the others keep stderr for their errors, named by rank.
    if (!comm.is_root() && !std::freopen("/dev/null", "w", stdout))
      throw Error("cannot silence stdout", "rank " + std::to_string(comm.rank()), "check /dev/null");
    try {
      run_training(run, &comm);
    } catch (const std::exception& e) {
      // The other ranks may wait in a collective for this one: end them all.
      std::fprintf(stderr, "lazytrain: error on rank %d of %d: %s\n", comm.rank(), comm.size(), e.what());
      std::fflush(stderr);
      comm.abort_all(1);
    }
  });
}

void add_eval_command(CLI::App& app) {
  struct Opts {
    std::string model, data, precision = "f32";
    int64_t problems = 200, max_new_tokens = 24;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("eval", "Exact match of greedy answers on GSM8K-format problems");
  cmd->add_option("--model", o->model, "model directory (config.json, safetensors, tokenizer.json)")->required();
  cmd->add_option("--data", o->data, "GSM8K-format JSONL (default: the synthetic task's held-out split)");
  cmd->add_option("--problems", o->problems, "at most this many problems");
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "generation limit per answer");
  cmd->add_option("--precision", o->precision, "f32 or bf16");
  cmd->callback([o] {
    if (o->problems <= 0) throw Error("--problems must be positive", "--problems", "");
    if (o->max_new_tokens <= 0) throw Error("--max-new-tokens must be positive", "--max-new-tokens", "");
    ModelRun m = load_model_dir(o->model);
    std::vector<QaExample> examples;
    if (o->data.empty()) {
      for (const auto& p : data::generate_arithmetic_problems({}, data::ArithmeticSplit::kEval, o->problems))
        examples.push_back({p.question, p.answer});
    } else {
      examples = load_qa_jsonl(o->data);
      if (static_cast<int64_t>(examples.size()) > o->problems) examples.resize(o->problems);
    }
    const EvalResult r = evaluate_exact_match(*m.params, *m.tokenizer, examples, parse_precision(o->precision),
                                              o->max_new_tokens);
    for (const auto& s : r.samples) std::printf("  %s\n", s.c_str());
    std::printf("exact match: %lld/%lld = %.2f%%\n", static_cast<long long>(r.correct),
                static_cast<long long>(r.examples), 100.0 * r.exact_match);
  });
}

void add_generate_command(CLI::App& app) {
  struct Opts {
    std::string model, prompt, precision = "f32";
    int64_t max_new_tokens = 32;
    bool json = false, raw = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("generate", "Greedy continuation of a prompt");
  cmd->add_option("--model", o->model, "model directory (config.json, safetensors, tokenizer.json)")->required();
  cmd->add_option("--prompt", o->prompt, "prompt text")->required();
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate at most");
  cmd->add_option("--precision", o->precision, "f32 or bf16");
  cmd->add_flag("--raw", o->raw, "tokenize the prompt as it is (default: the question/answer prompt the trainer uses)");
  cmd->add_flag("--json", o->json, "print {prompt_ids, ids, text} as JSON");
  cmd->callback([o] {
    if (o->max_new_tokens <= 0) throw Error("--max-new-tokens must be positive", "--max-new-tokens", "");
    ModelRun m = load_model_dir(o->model);
    const std::vector<int32_t> prompt =
        o->raw ? m.tokenizer->encode(o->prompt, true) : qa_prompt_ids(*m.tokenizer, o->prompt);
    const int64_t max_len = std::min<int64_t>(m.config.max_position_embeddings,
                                              static_cast<int64_t>(prompt.size()) + o->max_new_tokens);
    Generator gen(m.config, max_len, parse_precision(o->precision));
    gen.refresh_compute_copy(*m.params);
    const int32_t eos = data::resolve_eos_id(*m.tokenizer, "");
    const std::vector<int32_t> ids = gen.generate(*m.params, prompt, o->max_new_tokens, {eos});
    const std::string text = m.tokenizer->decode(ids, /*skip_special_tokens=*/true);
    if (o->json)
      std::printf("%s\n", nlohmann::json({{"prompt_ids", prompt}, {"ids", ids}, {"text", text}}).dump().c_str());
    else
      std::printf("%s\n", text.c_str());
  });
}

}  // namespace lt::cli
