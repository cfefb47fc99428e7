// Everything a training run is told, with one declarative table (train_config.cpp) that
// drives the YAML keys, the `lazytrain train` flags, their help text and the printout.
// Precedence: built-in defaults < --config YAML < command-line flags.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace lt {

struct TrainConfig {
  // Model: a Hugging Face directory to fine-tune, or empty to train from scratch with the
  // scratch_* shape (vocabulary from the tokenizer, positions = seq_len).
  std::string model;
  int64_t scratch_hidden = 192, scratch_layers = 4, scratch_heads = 6, scratch_kv_heads = 2;
  int64_t scratch_intermediate = 512;
  std::string tokenizer;  // tokenizer.json; empty: the model's, or the synthetic task's

  // Data: JSONL files; an empty train_data means the built-in synthetic arithmetic task.
  std::string train_data, eval_data;
  std::string format = "auto", chat_template = "chatml";
  bool train_on_prompt = false, skip_bad_lines = false;
  // Packed rows: "on" lets each document attend only to itself, with positions counted
  // from its own start (block-diagonal causal attention, as HF's DataCollatorWithFlattening
  // with flash-attention varlen); "off" lets a row's documents see one another at
  // positions 0..seq_len-1 (HF run_clm's group_texts, Megatron's default). "auto": on for
  // the prompt/response formats and the synthetic task, off for `text` pretraining, where
  // documents are mostly longer than a row and the reference pretraining recipes do not
  // mask either.
  std::string document_mask = "auto";
  int64_t synthetic_train_problems = 20000;
  // Whole numbers as single tokens in the task's tokenizer: the answer is then a lookup
  // over number tokens, not digit by digit. Measured on 2 CPU cores: 82% exact match
  // after 600 steps with number tokens against 14% with digit tokens.
  bool synthetic_number_tokens = true;
  int64_t synthetic_vocab = 512;
  int64_t eval_problems = 200;  // held-out problems scored by exact match (0: no eval)

  // Batch and length of the run.
  int64_t seq_len = 128, batch = 16, grad_accum = 1, steps = 1000;

  // Optimizer: adamw8 (hybrid 8-bit states), adamw (fp32 states), or sgd.
  std::string optimizer = "adamw8";
  // lr 2e-3, not 3e-3: measured on the default task (2 vCPU Zen 4), 3e-3 sits at the edge
  // where small rounding changes decide the run (71.5% exact match at LT_CPU=avx2, 98-100%
  // natively; 5e-3 diverges to 28.5%), while 2e-3 gave 90% at avx2 and 100% natively.
  double lr = 2e-3, min_lr_ratio = 0.1, weight_decay = 0.01;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, max_grad_norm = 1.0;
  int64_t warmup_steps = 30;
  std::string precision = "bf16";  // matmul inputs: bf16 (fp32 accumulation) or f32
  uint64_t seed = 1;

  // Streaming (out-of-core) training: a plan from `lazytrain plan` for this model, batch
  // and seq_len, run by the streaming executor on `backend` (cpu, or emu to exercise the
  // GPU path's copies); the plan's NVMe parts (activations, paged optimizer states) live
  // in offload_dir (empty: the system temporary directory). Empty plan: in memory.
  std::string plan, backend = "cpu", offload_dir;
  // Or let the trainer plan: compute_budget_gb > 0 solves the MILP for this run on the
  // `hardware` profile (default: profiles/local.json, from `lazytrain profile`) with that
  // compute-tier budget, and writes the plan to output_dir/plan.json.
  double compute_budget_gb = 0;
  // The host memory that plan may use, GB (0: the profile's): the planner pages optimizer
  // states to NVMe to keep the host peak within it.
  double host_budget_gb = 0;
  std::string hardware = "local";
  double plan_time_limit = 10;  // seconds the MILP may take, for the run's plan and re-plans
  // Re-planning (train/replanner.h): "on" watches a streamed run whose plan is a MILP plan;
  // when a measured per-layer compute time or link rate stays more than replan_threshold
  // (relative) off the plan's profile for replan_steps steps in a row, the MILP is solved
  // again with the measured profile in the background, and the run switches to the new
  // plan at a step boundary if it is predicted replan_margin faster than the current plan
  // on the same profile. Plans change speed and memory, never the math. "off": one plan.
  std::string adaptive_plan = "on";
  double replan_threshold = 0.15, replan_margin = 0.05;
  int64_t replan_steps = 3;

  // Data parallelism (mpirun -np N): "on" shards the optimizer (train/optimizer_shards.h):
  // each rank holds about 1/N of the optimizer states and runs 1/N of the update; "off"
  // gives every rank all of them. The same bits either way.
  std::string shard_optimizer = "on";

  // Output.
  std::string output_dir = "runs/default";
  int64_t log_every = 10, eval_every = 0, save_every = 0;  // 0: at the end only
  int64_t keep_checkpoints = 2;
  int64_t max_new_tokens = 24;
  bool resume = false;
  std::string summary_json;
};

// Reads a YAML file of `key: value` pairs named as in the table; an unknown key or a
// value of the wrong type throws lt::Error naming the file, line and key.
void apply_yaml_config(TrainConfig& cfg, const std::string& path);
// Adds one flag per table entry to `cmd` (--seq-len for seq_len, and so on).
void add_train_flags(CLI::App& cmd, TrainConfig& cfg);
// Copies into dst the fields whose flags were given on cmd's command line (`parsed` is
// the config add_train_flags() wrote into), so flags override the YAML file.
void apply_given_flags(TrainConfig& dst, TrainConfig& parsed, const CLI::App& cmd);
// Checks ranges and combinations; throws lt::Error naming the key.
void validate(const TrainConfig& cfg);
// "key: value" lines, for the log and the checkpoint.
std::string describe(const TrainConfig& cfg);

}  // namespace lt
