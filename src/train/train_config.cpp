#include "train/train_config.h"

#include <cmath>
#include <filesystem>
#include <functional>
#include <sstream>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "core/error.h"
#include "exec/backend_cuda.h"

namespace lt {

namespace {

using FieldPtr = std::variant<std::string*, int64_t*, uint64_t*, double*, bool*>;

struct Field {
  const char* key;
  const char* help;
  FieldPtr ptr;
};

// The one table: YAML key, flag (--key with '_' as '-'), help, and where it lands.
std::vector<Field> fields(TrainConfig& c) {
  return {
      {"model", "Hugging Face model directory to fine-tune (empty: train from scratch)", &c.model},
      {"scratch_hidden", "from-scratch model: hidden size", &c.scratch_hidden},
      {"scratch_layers", "from-scratch model: decoder layers", &c.scratch_layers},
      {"scratch_heads", "from-scratch model: attention heads", &c.scratch_heads},
      {"scratch_kv_heads", "from-scratch model: key/value heads", &c.scratch_kv_heads},
      {"scratch_intermediate", "from-scratch model: MLP size", &c.scratch_intermediate},
      {"tokenizer", "tokenizer.json (default: the model's, or the synthetic task's)", &c.tokenizer},
      {"train_data", "training JSONL (empty: the built-in synthetic arithmetic task)", &c.train_data},
      {"eval_data", "evaluation JSONL in GSM8K format (question/answer)", &c.eval_data},
      {"format", "JSONL format: auto, text, prompt_completion, alpaca, gsm8k, messages", &c.format},
      {"chat_template", "chat template for messages: chatml or llama3", &c.chat_template},
      {"train_on_prompt", "also train on prompt tokens", &c.train_on_prompt},
      {"skip_bad_lines", "skip and count malformed JSONL lines instead of failing", &c.skip_bad_lines},
      {"document_mask",
       "packed documents attend only to themselves, positions restarting at each: on, off, or auto (on except for "
       "the text format)",
       &c.document_mask},
      {"synthetic_train_problems", "synthetic task: training problems", &c.synthetic_train_problems},
      {"synthetic_number_tokens", "synthetic task: whole numbers as single tokens", &c.synthetic_number_tokens},
      {"synthetic_vocab", "synthetic task: tokenizer vocabulary size", &c.synthetic_vocab},
      {"eval_problems", "held-out problems scored by exact match (0: none)", &c.eval_problems},
      {"seq_len", "tokens per packed sequence", &c.seq_len},
      {"batch", "sequences per micro-batch", &c.batch},
      {"grad_accum", "micro-batches per optimizer step", &c.grad_accum},
      {"steps", "optimizer steps", &c.steps},
      {"optimizer", "adamw8 (hybrid 8-bit states), adamw (fp32 states) or sgd", &c.optimizer},
      {"lr", "peak learning rate", &c.lr},
      {"min_lr_ratio", "cosine floor as a fraction of lr", &c.min_lr_ratio},
      {"warmup_steps", "linear warmup steps", &c.warmup_steps},
      {"weight_decay", "decoupled weight decay (not on norms and biases)", &c.weight_decay},
      {"beta1", "AdamW beta1", &c.beta1},
      {"beta2", "AdamW beta2", &c.beta2},
      {"eps", "AdamW epsilon", &c.eps},
      {"max_grad_norm", "global gradient-norm clip (0: off)", &c.max_grad_norm},
      {"precision", "matmul precision: bf16 (fp32 accumulation) or f32", &c.precision},
      {"seed", "seed for initialisation and data order", &c.seed},
      {"plan", "plan JSON from `lazytrain plan` to train out of core with (empty: in memory)", &c.plan},
      {"backend", "streaming backend: cpu, emu (separate compute tier with copy threads), or cuda (no step has run on a GPU yet: refused unless LT_CUDA_TRIAL=1)", &c.backend},
      {"offload_dir", "directory for the plan's NVMe tier (empty: the system temp directory)", &c.offload_dir},
      {"compute_budget_gb", "plan this run (MILP) for a compute tier of this many GB and train out of core (0: off)",
       &c.compute_budget_gb},
      {"host_budget_gb",
       "host memory the compute_budget_gb plan may use, GB: optimizer states page to NVMe to stay within it "
       "(0: the profile's)",
       &c.host_budget_gb},
      {"hardware", "hardware profile for compute_budget_gb (profiles/*.json name or file)", &c.hardware},
      {"plan_time_limit", "seconds the MILP may take (the run's plan and each re-plan)", &c.plan_time_limit},
      {"adaptive_plan",
       "re-plan a streamed MILP run when measured compute or link rates drift from the plan's profile: on or off",
       &c.adaptive_plan},
      {"replan_threshold", "relative drift of a measured rate that counts (0.15: 15%)", &c.replan_threshold},
      {"replan_steps", "consecutive drifted steps before a re-plan", &c.replan_steps},
      {"replan_margin", "how much faster (relative) a re-plan must be predicted to be switched to",
       &c.replan_margin},
      {"shard_optimizer",
       "under mpirun: each rank keeps and updates the optimizer states of its part of the model (ZeRO-1): on or "
       "off (every rank updates the whole model)",
       &c.shard_optimizer},
      {"output_dir", "where checkpoints, metrics and the summary go", &c.output_dir},
      {"log_every", "progress/metrics interval in steps", &c.log_every},
      {"eval_every", "evaluation interval in steps (0: at the end)", &c.eval_every},
      {"save_every", "checkpoint interval in steps (0: at the end)", &c.save_every},
      {"keep_checkpoints", "complete checkpoints kept (older ones are removed)", &c.keep_checkpoints},
      {"max_new_tokens", "generation limit for evaluation", &c.max_new_tokens},
      {"resume", "continue from the newest complete checkpoint in output_dir", &c.resume},
      {"summary_json", "write a JSON summary of the run to this file", &c.summary_json},
  };
}

std::string flag_name(const char* key) {
  std::string f = std::string("--") + key;
  for (char& ch : f)
    if (ch == '_') ch = '-';
  return f;
}

}  // namespace

void apply_yaml_config(TrainConfig& cfg, const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw Error("cannot read the config file", path, "check the path");
  } catch (const YAML::Exception& e) {
    throw Error("malformed YAML: " + std::string(e.what()), path, "fix the file's syntax");
  }
  if (root.IsNull()) return;
  if (!root.IsMap()) throw Error("the config must be a mapping of key: value", path, "see `lazytrain train --help`");
  std::vector<Field> table = fields(cfg);
  // YAML text is UTF-8, and describe() prints strings as JSON, which must be: nlohmann's
  // strict check (no overlong forms, no surrogates) decides.
  auto valid_utf8 = [](const std::string& s) {
    try {
      (void)nlohmann::json(s).dump();
      return true;
    } catch (const nlohmann::json::type_error&) {
      return false;
    }
  };
  for (const auto& kv : root) {
    if (!kv.first.IsScalar())
      throw Error("a key is not a plain name", path + ":" + std::to_string(kv.first.Mark().line + 1),
                  "write one `key: value` pair per line; see `lazytrain train --help` for the keys");
    const std::string key = kv.first.as<std::string>();
    const std::string where = path + ":" + std::to_string(kv.first.Mark().line + 1) + " (" + key + ")";
    const Field* f = nullptr;
    for (const Field& candidate : table)
      if (key == candidate.key) f = &candidate;
    if (!f) throw Error("unknown key '" + key + "'", where, "see `lazytrain train --help` for the keys");
    try {
      std::visit([&](auto* p) { *p = kv.second.as<std::remove_pointer_t<decltype(p)>>(); }, f->ptr);
    } catch (const YAML::Exception&) {
      throw Error("value of '" + key + "' has the wrong type", where, std::string("expected: ") + f->help);
    }
    if (auto* const* str = std::get_if<std::string*>(&f->ptr); str && !valid_utf8(**str))
      throw Error("value of '" + key + "' is not valid UTF-8", where, "save the config file as UTF-8");
    // YAML's .nan and .inf: no setting takes one, and describe() could not write it back.
    if (auto* const* num = std::get_if<double*>(&f->ptr); num && !std::isfinite(**num))
      throw Error("value of '" + key + "' is not a finite number", where, std::string("expected: ") + f->help);
  }
}

void add_train_flags(CLI::App& cmd, TrainConfig& cfg) {
  for (const Field& f : fields(cfg))
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, bool>)
            cmd.add_flag(flag_name(f.key), *p, f.help);
          else
            cmd.add_option(flag_name(f.key), *p, f.help)->capture_default_str();
        },
        f.ptr);
}

void apply_given_flags(TrainConfig& dst, TrainConfig& parsed, const CLI::App& cmd) {
  std::vector<Field> to = fields(dst), from = fields(parsed);
  for (size_t i = 0; i < to.size(); ++i) {
    const CLI::Option* opt = cmd.get_option_no_throw(flag_name(to[i].key));
    if (opt == nullptr || opt->count() == 0) continue;
    std::visit([&](auto* d) { *d = *std::get<decltype(d)>(from[i].ptr); }, to[i].ptr);
  }
}

void validate(const TrainConfig& c) {
  auto positive = [](int64_t v, const char* key) {
    if (v <= 0) throw Error(std::string(key) + " must be positive, got " + std::to_string(v), "train config", "");
  };
  positive(c.seq_len, "seq_len");
  positive(c.batch, "batch");
  positive(c.grad_accum, "grad_accum");
  positive(c.steps, "steps");
  positive(c.keep_checkpoints, "keep_checkpoints");
  if (c.optimizer != "adamw8" && c.optimizer != "adamw" && c.optimizer != "sgd")
    throw Error("unknown optimizer '" + c.optimizer + "'", "train config (optimizer)", "use adamw8, adamw or sgd");
  if (c.precision != "bf16" && c.precision != "f32")
    throw Error("unknown precision '" + c.precision + "'", "train config (precision)", "use bf16 or f32");
  if (!(c.lr > 0)) throw Error("lr must be positive", "train config (lr)", "");
  if (!c.plan.empty() && c.compute_budget_gb > 0)
    throw Error("both a plan and a compute budget were given", "train config (plan, compute_budget_gb)",
                "give one: --plan FILE to run a plan, or --compute-budget-gb GB to have the trainer plan");
  if (c.compute_budget_gb < 0) throw Error("compute_budget_gb must not be negative", "train config", "");
  if (!(c.host_budget_gb >= 0)) throw Error("host_budget_gb must not be negative", "train config (host_budget_gb)", "");
  if (c.host_budget_gb > 0 && !(c.compute_budget_gb > 0))
    throw Error("host_budget_gb is a budget for the run's own plan, and this run plans nothing",
                "train config (host_budget_gb)",
                "give compute_budget_gb too, or plan with `lazytrain plan --host-budget-gb` and pass --plan");
  if (c.document_mask != "auto" && c.document_mask != "on" && c.document_mask != "off")
    throw Error("unknown document_mask '" + c.document_mask + "'", "train config (document_mask)",
                "use on, off or auto (on except for the text format)");
  if (c.shard_optimizer != "on" && c.shard_optimizer != "off")
    throw Error("unknown shard_optimizer '" + c.shard_optimizer + "'", "train config (shard_optimizer)", "use on or off");
  if (c.adaptive_plan != "on" && c.adaptive_plan != "off")
    throw Error("unknown adaptive_plan '" + c.adaptive_plan + "'", "train config (adaptive_plan)", "use on or off");
  if (!(c.replan_threshold > 0) || !std::isfinite(c.replan_threshold))
    throw Error("replan_threshold must be positive", "train config (replan_threshold)", "e.g. 0.15 for 15%");
  if (c.replan_steps < 1)
    throw Error("replan_steps must be at least 1", "train config (replan_steps)", "e.g. 3");
  if (!(c.replan_margin >= 0 && c.replan_margin < 1))
    throw Error("replan_margin must be in [0, 1)", "train config (replan_margin)", "e.g. 0.05 for 5%");
  if (!(c.plan_time_limit > 0) || !std::isfinite(c.plan_time_limit))
    throw Error("plan_time_limit must be a positive number of seconds", "train config (plan_time_limit)", "e.g. 10");
  if (c.backend == "cuda") {
    const std::string why = cuda_backend_unavailable_reason();
    if (!why.empty()) throw Error(why, "train config (backend)", "use cpu or emu");
  } else if (c.backend != "cpu" && c.backend != "emu") {
    throw Error("unknown backend '" + c.backend + "'", "train config (backend)", "use cpu, emu or cuda");
  }
  // Without a plan the whole model trains in memory on the CPU, whatever the backend says.
  if (c.backend != "cpu" && c.plan.empty() && !(c.compute_budget_gb > 0))
    throw Error("backend " + c.backend + " runs the streaming executor, which needs a plan", "train config (backend)",
                "give --compute-budget-gb GB (or --plan FILE), or drop --backend to train in memory on the CPU");
  if (c.eval_problems < 0 || c.log_every < 0 || c.eval_every < 0 || c.save_every < 0)
    throw Error("intervals and counts must not be negative", "train config", "");
  // The optimizer's and schedule's numbers, checked here so that a typo fails before the
  // model is built, naming the key.
  auto in_range = [](double v, double lo, double hi, bool hi_open, const char* key, const char* fix) {
    if (!(v >= lo && (hi_open ? v < hi : v <= hi)) || !std::isfinite(v))
      throw Error(std::string(key) + " is " + std::to_string(v) + ", outside its range", std::string("train config (") + key + ")", fix);
  };
  in_range(c.beta1, 0, 1, true, "beta1", "use a value in [0, 1), e.g. 0.9");
  in_range(c.beta2, 0, 1, true, "beta2", "use a value in [0, 1), e.g. 0.999");
  if (!(c.eps > 0) || !std::isfinite(c.eps)) throw Error("eps must be positive", "train config (eps)", "e.g. 1e-8");
  in_range(c.weight_decay, 0, 1e300, false, "weight_decay", "use 0 (off) or a positive value, e.g. 0.01");
  in_range(c.max_grad_norm, 0, 1e300, false, "max_grad_norm", "use 0 (no clipping) or a positive norm, e.g. 1.0");
  in_range(c.min_lr_ratio, 0, 1, false, "min_lr_ratio", "use a fraction of lr in [0, 1]");
  if (c.warmup_steps < 0) throw Error("warmup_steps must not be negative", "train config (warmup_steps)", "");
  if (c.max_new_tokens <= 0)
    throw Error("max_new_tokens must be positive", "train config (max_new_tokens)", "e.g. 24");
  std::error_code ec;
  if (!c.train_data.empty() && !std::filesystem::is_regular_file(c.train_data, ec))
    throw Error("the training data file does not exist", "train config (train_data " + c.train_data + ")",
                "give a JSONL file");
  if (!c.eval_data.empty() && !std::filesystem::is_regular_file(c.eval_data, ec))
    throw Error("the evaluation data file does not exist", "train config (eval_data " + c.eval_data + ")",
                "give a JSONL file in GSM8K format (question/answer)");
}

std::string describe(const TrainConfig& cfg) {
  TrainConfig copy = cfg;
  std::ostringstream out;
  for (const Field& f : fields(copy))
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          out << f.key << ": ";
          if constexpr (std::is_same_v<T, std::string>)
            out << nlohmann::json(*p).dump();  // quoted: valid YAML, empty stays a string
          else if constexpr (std::is_same_v<T, bool>)
            out << (*p ? "true" : "false");
          else
            out << *p;
          out << "\n";
        },
        f.ptr);
  return out.str();
}

}  // namespace lt
