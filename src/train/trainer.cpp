#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include <unistd.h>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/measure.h"
#include "core/threads.h"
#include "data/jsonl_dataset.h"
#include "data/packing.h"
#include "data/synthetic_arith.h"
#include "data/tokenizer.h"
#include "dist/communicator.h"
#include "dist/link_rate.h"
#include "exec/streaming_executor.h"
#include "io/atomic_file.h"
#include "kernels/cpu/matmul.h"
#include "layers/model_step.h"
#include "model/checkpoint.h"
#include "model/layer_specs.h"
#include "optim/adamw.h"
#include "plan/hardware_profile.h"
#include "plan/plan_json.h"
#include "plan/plan_validate.h"
#include "train/bf16_gemm_paths.h"
#include "train/checkpoints.h"
#include "train/evaluate.h"
#include "train/hf_metadata.h"
#include "train/progress.h"
#include "train/step_engine.h"
#include "train/streamed_training.h"
#include "train/updater.h"

namespace fs = std::filesystem;

namespace lt {

nlohmann::json TrainSummary::to_json() const {
  return {{"steps", steps},
          {"final_loss", final_loss},
          {"eval_exact_match", eval_exact_match < 0 ? nlohmann::json(nullptr) : nlohmann::json(eval_exact_match)},
          {"tokens_per_s", tokens_per_s},
          {"peak_bytes", {{"compute", peak_compute_bytes}, {"host", peak_host_bytes}, {"nvme", peak_nvme_bytes}}},
          {"peak_rss_bytes", peak_rss_bytes},
          {"world_size", world_size},
          {"collective_bytes_per_step", collective_bytes_per_step},
          {"collective_hidden_frac", collective_hidden_frac},
          {"optimizer_state_bytes", optimizer_state_bytes},
          {"checkpoint_dir", checkpoint_dir}};
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Everything the run reads: tokenizer (with its JSON text, copied into checkpoints), the
// training documents, and the held-out problems.
struct RunData {
  std::string tokenizer_json;
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::unique_ptr<data::Dataset> train;
  std::vector<QaExample> eval;
};

RunData load_data(const TrainConfig& cfg, const std::string& checkpoint_or_model) {
  RunData d;
  const bool synthetic = cfg.train_data.empty();
  data::ArithmeticTaskOptions task;
  std::string tokenizer_source = cfg.tokenizer;  // where the tokenizer came from, for errors
  if (!cfg.tokenizer.empty()) {
    d.tokenizer_json = read_text_file(cfg.tokenizer);
  } else if (!checkpoint_or_model.empty() && fs::exists(checkpoint_or_model + "/tokenizer.json")) {
    tokenizer_source = checkpoint_or_model + "/tokenizer.json";
    d.tokenizer_json = read_text_file(tokenizer_source);
  } else if (synthetic) {
    tokenizer_source = "the synthetic task's generated tokenizer";
    d.tokenizer_json =
        data::synthetic_tokenizer_json(task, static_cast<size_t>(cfg.synthetic_vocab), cfg.synthetic_number_tokens).dump();
  } else {
    throw Error("no tokenizer: " + (checkpoint_or_model.empty() ? std::string("training from scratch on --train-data")
                                                               : checkpoint_or_model + " has no tokenizer.json"),
                "train config (tokenizer)", "give --tokenizer, or a --model directory that has tokenizer.json");
  }
  d.tokenizer = std::make_unique<data::Tokenizer>(data::Tokenizer::from_json_text(d.tokenizer_json, tokenizer_source));

  data::DatasetOptions opts;
  opts.format = data::parse_dataset_format(cfg.format);
  opts.chat_template = data::parse_chat_template(cfg.chat_template);
  opts.train_on_prompt = cfg.train_on_prompt;
  opts.skip_bad_lines = cfg.skip_bad_lines;
  if (synthetic) {
    std::vector<nlohmann::json> records;
    for (const auto& p : data::generate_arithmetic_problems(task, data::ArithmeticSplit::kTrain,
                                                            static_cast<size_t>(cfg.synthetic_train_problems)))
      records.push_back({{"question", p.question}, {"answer", p.answer}});
    opts.format = data::DatasetFormat::kGsm8k;
    d.train = std::make_unique<data::Dataset>(
        data::Dataset::from_records(records, "synthetic arithmetic (train split)", *d.tokenizer, opts));
    if (cfg.eval_data.empty())
      for (const auto& p : data::generate_arithmetic_problems(task, data::ArithmeticSplit::kEval,
                                                              static_cast<size_t>(cfg.eval_problems)))
        d.eval.push_back({p.question, p.answer});
  } else {
    d.train = std::make_unique<data::Dataset>(data::Dataset::load_jsonl(cfg.train_data, *d.tokenizer, opts));
  }
  if (!cfg.eval_data.empty()) {
    d.eval = load_qa_jsonl(cfg.eval_data);
    if (static_cast<int64_t>(d.eval.size()) > cfg.eval_problems) d.eval.resize(cfg.eval_problems);
  }
  if (d.train->size() == 0) throw Error("the training data has no documents", cfg.train_data, "check the file");
  return d;
}

// The matmul peak that MFU is measured against: the profile's bf16 rate for bf16 runs when
// it has one, else its peak, at this process's share of the profile's threads (a CPU's: a
// GPU's rate is the device's); 0 when the profile cannot be read (MFU is then not shown).
double profile_peak_flops(const TrainConfig& cfg) {
  try {
    const HardwareProfile hw = load_hardware_profile(cfg.hardware);
    return (cfg.precision == "bf16" && hw.bf16_peak_flops > 0 ? hw.bf16_peak_flops : hw.peak_flops) *
           profile_compute_share(hw);
  } catch (const Error&) {
    return 0;
  }
}

ModelConfig scratch_config(const TrainConfig& cfg, int32_t vocab) {
  ModelConfig c;
  c.model_type = "llama";
  c.hidden_size = cfg.scratch_hidden;
  c.num_layers = cfg.scratch_layers;
  c.num_heads = cfg.scratch_heads;
  c.num_kv_heads = cfg.scratch_kv_heads;
  if (c.num_heads <= 0 || c.hidden_size % c.num_heads != 0 || c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0)
    throw Error("scratch_hidden must divide by scratch_heads, and scratch_heads by scratch_kv_heads",
                "train config (scratch_*)", "pick compatible sizes");
  c.head_dim = c.hidden_size / c.num_heads;
  if (c.head_dim % 2 != 0)
    throw Error("scratch_hidden / scratch_heads = " + std::to_string(c.head_dim) +
                    " is odd; rotary position embeddings need an even head size",
                "train config (scratch_hidden, scratch_heads)", "pick sizes whose quotient is even");
  c.intermediate_size = cfg.scratch_intermediate;
  c.vocab_size = vocab;
  c.max_position_embeddings = cfg.seq_len;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = true;
  return c;
}

// This rank's rows of every micro-batch: rows [rank * share, (rank + 1) * share) of each
// of the grad_accum micro-batches of `rows` sequences in `all` (seq values per row).
template <typename T>
void take_rank_rows(std::vector<T>& mine, const std::vector<T>& all, int64_t grad_accum, int64_t rows, int64_t seq,
                    int rank, int ranks) {
  const int64_t share = rows / ranks;
  for (int64_t a = 0; a < grad_accum; ++a)
    std::copy_n(all.begin() + (a * rows + rank * share) * seq, share * seq, mine.begin() + a * share * seq);
}

// Data parallelism's preconditions, checked before anything is read or written.
void check_data_parallel(const TrainConfig& cfg, const Communicator& comm) {
  const int n = comm.size();
  if (n == 1) return;
  const std::string where = "train config under mpirun -np " + std::to_string(n);
  if (cfg.batch % n != 0)
    throw Error("batch " + std::to_string(cfg.batch) + " does not divide among " + std::to_string(n) + " ranks",
                where, "give a --batch that is a multiple of the number of ranks (it stays the global batch)");
}

// A streamed plan under data parallelism: each rank runs it on its rows of the batch, and a
// sharded optimizer keeps its states in memory.
void check_rank_plan(const Plan& plan, const TrainConfig& rank_cfg, int ranks, bool sharded, const std::string& where) {
  if (plan.batch != rank_cfg.batch && plan.batch == rank_cfg.batch * ranks)
    throw Error("the plan is for batch " + std::to_string(plan.batch) + ", the whole batch; each of the " +
                    std::to_string(ranks) + " ranks runs " + std::to_string(rank_cfg.batch) + " of its rows",
                where,
                "plan for the rows of one rank: `lazytrain plan ... --batch " + std::to_string(rank_cfg.batch) + "`");
  // A plan that counts the ranks' exchange (plan --ranks N) must count this run's.
  if (plan.ranks > 1 && (plan.ranks != ranks || plan.shard_optimizer != sharded))
    throw Error(std::string("the plan is for ") + std::to_string(plan.ranks) + " ranks with the optimizer " +
                    (plan.shard_optimizer ? "sharded" : "on every rank") + ", this run has " + std::to_string(ranks) +
                    " with it " + (sharded ? "sharded" : "on every rank"),
                where,
                "plan with `lazytrain plan ... --ranks " + std::to_string(ranks) + " --shard-optimizer " +
                    (sharded ? "on" : "off") + "`, or train with the plan's");
  if (sharded && !plan.nvme_state_layers.empty())
    throw Error("the plan pages the optimizer states of " + std::to_string(plan.nvme_state_layers.size()) +
                    " layers from NVMe, and the optimizer is sharded over the ranks, whose parts stay in memory",
                where,
                "train with --shard-optimizer off, or plan with --nvme-state-layers 0 (where the trainer plans, "
                "with a larger --host-budget-gb)");
}

// Fails on every rank unless all ranks hold the same weights, bit for bit.
uint64_t check_ranks_agree(Communicator& comm, const ModelParameters& params, int64_t step) {
  const uint64_t mine = fingerprint(params.data(), params.numel());
  const std::vector<uint64_t> all = comm.all_gather(mine);
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r] != all[0])
      throw Error("after step " + std::to_string(step) + " rank " + std::to_string(r) +
                      "'s weights differ from rank 0's (fingerprints " + std::to_string(all[r]) + " and " +
                      std::to_string(all[0]) + ")",
                  "data-parallel training", "please report it with the command line: the ranks must agree");
  return mine;
}

}  // namespace

TrainSummary run_training(const TrainConfig& cfg, Communicator* comm_arg) {
  validate(cfg);
  Communicator* comm = comm_arg && comm_arg->size() > 1 ? comm_arg : nullptr;
  const int ranks = comm ? comm->size() : 1, rank = comm ? comm->rank() : 0;
  const bool writer = rank == 0;  // prints, evaluates, writes metrics and checkpoints
  if (comm) check_data_parallel(cfg, *comm);
  if (!cfg.model.empty()) check_model_dir(cfg.model, "train config (model)");
  if (writer) {
    prepare_output_dir(cfg.output_dir);
    clean_up_checkpoints(cfg.output_dir, cfg.keep_checkpoints);
  }
  if (comm) comm->barrier();  // the others read the output directory (resume) after rank 0 tidied it
  std::optional<std::string> resume_from;
  if (cfg.resume) {
    resume_from = newest_complete_checkpoint(cfg.output_dir);
    if (!resume_from)
      std::printf("resume: no complete checkpoint in %s, starting from step 0\n", cfg.output_dir.c_str());
  }
  const std::string weights_dir = resume_from ? *resume_from : cfg.model;
  // The resumed checkpoint's trainer state, read once: its bf16 GEMM paths now, its step
  // and data position below.
  const std::string state_path = resume_from ? *resume_from + "/trainer_state.json" : "";
  nlohmann::json resumed_state;
  if (resume_from) {
    try {
      resumed_state = nlohmann::json::parse(read_text_file(state_path));
    } catch (const nlohmann::json::exception& e) {
      throw Error("malformed trainer state: " + std::string(e.what()), state_path, "use another checkpoint");
    }
  }
  if (writer)
    choose_bf16_gemm_paths(cfg.hardware, resume_from ? &resumed_state : nullptr, resume_from.value_or(""),
                           cfg.precision == "bf16");
  if (comm) take_rank0_bf16_gemm_paths(*comm);
  RunData data = load_data(cfg, weights_dir);

  const ModelConfig mc = weights_dir.empty() ? scratch_config(cfg, data.tokenizer->vocab_size())
                                             : load_model_config(weights_dir);
  if (data.tokenizer->vocab_size() > mc.vocab_size)
    throw Error("the tokenizer has ids up to " + std::to_string(data.tokenizer->vocab_size() - 1) +
                    " but the model's vocabulary is " + std::to_string(mc.vocab_size),
                weights_dir.empty() ? "tokenizer" : weights_dir, "use the model's own tokenizer");
  ModelParameters params(mc);
  if (weights_dir.empty())
    init_parameters(params, cfg.seed);
  else
    load_parameters(params, weights_dir);
  ModelParameters grads(mc);
  const Precision precision = cfg.precision == "bf16" ? Precision::BF16 : Precision::F32;
  // Each rank's engine runs its share of every micro-batch's rows.
  TrainConfig rank_cfg = cfg;
  rank_cfg.batch = cfg.batch / ranks;
  const bool sharded = comm && cfg.shard_optimizer == "on";
  // Out of core: the streaming executor under the user's plan, or one made for the
  // compute budget (a plan for one rank's rows); otherwise the whole model in memory.
  std::optional<Plan> plan;
  std::optional<PlanRequest> plan_request;  // the request the run planned with, for re-plans
  if (!cfg.plan.empty()) {
    plan = load_plan(cfg.plan);
    if (comm) check_rank_plan(*plan, rank_cfg, ranks, sharded, cfg.plan);
    if (!comm && plan->ranks > 1)
      throw Error("the plan is for " + std::to_string(plan->ranks) + " data-parallel ranks; this run is one process",
                  cfg.plan, "run it under `mpirun -np " + std::to_string(plan->ranks) + "`, or plan with --ranks 1");
    check_plan_fits(*plan, mc, rank_cfg, cfg.plan);  // first: "another model / batch" says more than a broken rule
    require_valid_plan(*plan, cfg.plan);
  } else if (cfg.compute_budget_gb > 0) {
    // One plan for all ranks: rank 0 solves it (a time-limited solve may end elsewhere on
    // another rank) and the others read what it wrote.
    RankPlanning rp{ranks, sharded, 0, comm ? ranks_gpus_shared_reason(*comm, cfg.backend) : ""};
    if (comm) {  // the plan counts the ranks' exchange: at the profile's link rate, or this one
      rp.network_bw = measure_rank_link_bw(*comm);
      if (writer) {
        const PlanRequest req = run_plan_request(rank_cfg, mc, rp);
        const bool measured = req.hardware.network_bw == rp.network_bw;
        std::printf("data parallel: the plan counts the ranks' exchange at %s/s (%s)\n",
                    format_bytes(static_cast<int64_t>(req.hardware.network_bw)).c_str(),
                    measured ? "measured: rank 0 receiving the sum of 32 MiB from each rank"
                             : "the profile's links.network_gbps");
      }
    }
    if (writer) plan = plan_this_run(rank_cfg, mc, rp);
    if (comm) {
      comm->barrier();
      if (!writer) plan = load_plan(cfg.output_dir + "/plan.json");
      check_rank_plan(*plan, rank_cfg, ranks, sharded, "train config (compute_budget_gb)");
    }
    plan_request = run_plan_request(rank_cfg, mc, rp);
  }
  // The special tokens and chat template other tools must see (train/hf_metadata.h).
  const data::DatasetFormat trained_format = data.train->stats().format;
  const HfMetadata hf_meta = make_hf_metadata(
      *data.tokenizer, weights_dir,
      trained_format == data::DatasetFormat::kMessages ? std::optional(data::parse_chat_template(cfg.chat_template))
                                                       : std::nullopt,
      mc.max_position_embeddings);
  if (comm && mc.has_moe() && mc.moe.output_router_logits)
    throw Error("the routers' load-balancing loss counts the routing of the whole batch; each rank sees only its "
                "rows, so under data parallelism it would be another loss",
                weights_dir + "/config.json (output_router_logits)",
                "set output_router_logits to false for this run, or run without mpirun");
  Updater updater(cfg, params, plan ? plan->nvme_state_layers : std::vector<int>{}, comm);
  const std::unique_ptr<StepEngine> engine =
      make_step_engine(rank_cfg, plan, std::move(plan_request), params, grads, updater, comm);

  data::LoaderOptions lo;
  lo.seq_len = cfg.seq_len;
  lo.seed = cfg.seed;
  data::PackedLoader loader(*data.train, lo);
  // Block-diagonal attention over the packed documents (train_config.h, document_mask).
  // A Gated DeltaNet layer's state runs through the whole row, so a hybrid model cannot
  // keep packed documents apart: auto turns the mask off for it, and on is an error.
  if (mc.hybrid() && cfg.document_mask == "on")
    throw Error("document_mask on: the Gated DeltaNet layers of " + mc.model_type +
                    " carry their state across the whole row and cannot keep packed documents apart",
                "train config (document_mask)", "use document_mask auto or off for this model");
  const bool document_mask =
      !mc.hybrid() && (cfg.document_mask == "on" ||
                       (cfg.document_mask == "auto" && data.train->stats().format != data::DatasetFormat::kText));

  int64_t start_step = 0;
  double tokens_seen = 0;
  if (resume_from) {
    try {
      const nlohmann::json& st = resumed_state;
      start_step = checkpoint_count(st, "step", std::numeric_limits<int32_t>::max(), state_path);
      tokens_seen = st.at("tokens_seen").get<double>();
      if (!(tokens_seen >= 0) || !std::isfinite(tokens_seen))
        throw Error("\"tokens_seen\" is not a finite count", state_path, "the file is damaged; use another checkpoint");
      loader.set_position(data::DataPosition::from_json(st.at("data_position")));
    } catch (const nlohmann::json::exception& e) {
      throw Error("malformed trainer state: " + std::string(e.what()), state_path, "use another checkpoint");
    }
    engine->load_optimizer(*resume_from);
  }

  const int64_t n_params = params.numel();
  StepEngine::Memory memory = engine->memory();
  std::printf("lazytrain train: %s model, %lld layers, hidden %lld, %.2fM parameters, vocab %lld; %d threads\n",
              weights_dir.empty() ? "from-scratch llama" : weights_dir.c_str(), static_cast<long long>(mc.num_layers),
              static_cast<long long>(mc.hidden_size), n_params / 1e6, static_cast<long long>(mc.vocab_size), num_threads());
  std::printf("%s; matmuls: %s; optimizer kernels %s\n", cpu_summary().c_str(),
              precision == Precision::BF16 ? matmul_bf16_path().c_str()
                                           : ("fp32 GEMM (" + matmul_impl_name(256, 256, 256, Precision::F32) + ")").c_str(),
              adamw_kernels(AdamWKernel::Auto).name);
  std::printf("data: %zu training documents (%zu tokens, %zu trained), %zu evaluation problems\n", data.train->size(),
              data.train->stats().tokens, data.train->stats().trained_tokens, data.eval.size());
  std::printf("packing: %s\n", document_mask ? "each document attends only to itself, positions from its start (document_mask on)"
                                             : mc.hybrid() ? "documents in a row attend to each other, positions 0..seq_len-1 (document_mask off: the Gated DeltaNet state spans the row)"
                                                           : "documents in a row attend to each other, positions 0..seq_len-1 (document_mask off)");
  if (comm)
    std::printf("data parallel: %s; rank r runs rows [r*%lld, (r+1)*%lld) of each micro-batch of %lld; gradients "
                "summed in rank order before each update\n",
                comm->describe().c_str(), static_cast<long long>(rank_cfg.batch),
                static_cast<long long>(rank_cfg.batch), static_cast<long long>(cfg.batch));
  if (updater.sharded())
    std::printf("optimizer sharded over the ranks (ZeRO-1): rank 0 keeps and updates %s, %s of the %s of states "
                "(%s of the parameters); each part's updated weights go from its owner to every rank\n",
                updater.shards().describe(0).c_str(), format_bytes(updater.resident_state_bytes()).c_str(),
                format_bytes(updater.state_bytes()).c_str(),
                format_percent(static_cast<double>(updater.owned_numel()) / static_cast<double>(n_params)).c_str());
  // Open MPI binds each rank to one core when it starts two or fewer; the threads default
  // (all the CPUs this process may use) then leaves the rest of the machine idle.
  if (const long online = sysconf(_SC_NPROCESSORS_ONLN); comm && num_threads() == 1 && online > ranks)
    std::printf("note: rank 0 may use 1 of this machine's %ld CPUs (the launcher bound it to one core); with "
                "mpirun --bind-to none, or --map-by slot:PE=%ld, each rank trains with more threads\n",
                online, online / ranks);
  for (const std::string& line : engine->describe()) std::printf("%s\n", line.c_str());
  if (cfg.warmup_steps > cfg.steps)
    std::printf("note: warmup_steps %lld is longer than the run (%lld steps): the learning rate rises for the whole "
                "run and reaches %.3g, not --lr %.3g\n",
                static_cast<long long>(cfg.warmup_steps), static_cast<long long>(cfg.steps),
                cfg.lr * static_cast<double>(cfg.steps) / static_cast<double>(cfg.warmup_steps), cfg.lr);
  if (resume_from) std::printf("resumed from %s at step %lld\n", resume_from->c_str(), static_cast<long long>(start_step));
  std::fflush(stdout);

  // MFU as llm.c reports it: the model's training FLOPs (forward + backward, 3x forward;
  // recomputation not counted) per second over the hardware profile's peak.
  const double step_flops = 3.0 * static_cast<double>(cfg.grad_accum) *
                            (static_cast<double>(mc.num_layers) * block_forward_flops(mc, cfg.batch, cfg.seq_len) +
                             head_forward_flops(mc, cfg.batch, cfg.seq_len));
  const double peak_flops = profile_peak_flops(cfg);
  if (peak_flops > 0)
    std::printf("MFU: against %.1f TFLOP/s (the peak of hardware profile '%s'%s)\n", peak_flops / 1e12,
                cfg.hardware.c_str(), cfg.precision == "bf16" ? " for bf16 matmuls" : "");
  else
    std::printf("MFU: not shown (no '%s' hardware profile; `lazytrain profile` measures this machine's)\n",
                cfg.hardware.c_str());
  std::fflush(stdout);

  Progress progress(writer ? cfg.output_dir + "/metrics.jsonl" : "", start_step);
  const std::string plot_path = cfg.output_dir + "/metrics.svg";
  const std::string plot_title = "lazytrain " + (cfg.model.empty() ? std::string("from-scratch model") : cfg.model);
  TrainSummary summary;
  const int64_t rows = cfg.batch, seq = cfg.seq_len;
  std::vector<int32_t> ids(cfg.grad_accum * rows * seq), labels(ids.size()), positions(ids.size()), doc_start(ids.size());
  // This rank's rows of them (the same arrays with one rank).
  std::vector<int32_t> rank_ids(comm ? ids.size() / ranks : 0), rank_labels(rank_ids.size()),
      rank_doc_start(rank_ids.size());
  const auto run_start = Clock::now();
  double train_seconds = 0, loss = 0;
  std::string last_checkpoint;

  auto evaluate = [&](int64_t step) {
    engine->flush();  // evaluate the updated weights
    if (data.eval.empty() || !writer) return;
    const auto t0 = Clock::now();
    const EvalResult e = evaluate_exact_match(params, *data.tokenizer, data.eval, precision, cfg.max_new_tokens);
    summary.eval_exact_match = e.exact_match;
    progress.message("eval at step " + std::to_string(step) + ": exact match " + std::to_string(e.correct) + "/" +
                     std::to_string(e.examples) + " = " + std::to_string(100.0 * e.exact_match).substr(0, 5) +
                     "% (" + format_duration(seconds_since(t0)) + ")");
    for (const auto& s : e.samples) progress.message("  " + s);
    progress.metrics({{"step", step}, {"eval_exact_match", e.exact_match}, {"eval_examples", e.examples}});
  };
  auto save = [&](int64_t step) {
    engine->flush();  // a checkpoint holds no pending update
    if (comm) {
      const uint64_t f = check_ranks_agree(*comm, params, step);
      char line[160];
      std::snprintf(line, sizeof line, "data parallel: the %d ranks' weights agree bit for bit (fingerprint %016llx)",
                    ranks, static_cast<unsigned long long>(f));
      progress.message(line);
    }
    if (!writer) {  // rank 0 writes the checkpoint (the ranks hold the same weights)
      if (updater.sharded()) engine->save_optimizer({});  // sends this rank's states to rank 0
      return;
    }
    last_checkpoint = save_checkpoint(cfg.output_dir, step, cfg.keep_checkpoints, [&](const std::string& dir) {
      save_pretrained(params, dir);
      write_file_atomic(dir + "/tokenizer.json", data.tokenizer_json);
      write_hf_metadata(hf_meta, dir);
      engine->save_optimizer(dir);
      // Fault injection for the crash test: die with the checkpoint half written.
      if (const char* k = std::getenv("LT_TEST_KILL_DURING_SAVE"); k && std::atoll(k) == step) std::raise(SIGKILL);
      const nlohmann::json st = {{"step", step},
                                 {"tokens_seen", tokens_seen},
                                 {"data_position", loader.position().to_json()},
                                 {"loss", loss},
                                 {"bf16_gemm", bf16_gemm_paths_in_use()}};
      write_file_atomic(dir + "/trainer_state.json", st.dump(2) + "\n");
      write_file_atomic(dir + "/train_config.yaml", describe(cfg));
    });
    progress.write_plot(plot_path, plot_title);
    progress.message("saved " + last_checkpoint);
  };

  // Re-plans: printed, logged as "replan" records, and the new plan written beside the
  // first (plan.replan-<step>.json); the memory figures follow the plan that runs.
  auto report_replans = [&](const std::vector<ReplanEvent>& events) {
    for (const ReplanEvent& e : events) {
      progress.message(e.message());
      if (e.started) continue;
      progress.metrics(e.record());
      if (!e.switched) continue;
      save_plan(e.result.plan, cfg.output_dir + "/plan.replan-" + std::to_string(e.step) + ".json");
      memory = engine->memory();
    }
  };

  const int64_t setup_bytes_sent = comm ? comm->bytes_sent() : 0;  // the steps' collectives come after
  for (int64_t step = start_step + 1; step <= cfg.steps; ++step) {
    const auto t0 = Clock::now();
    // Fault injection for the data-parallel fault test: rank R dies as step S starts.
    if (const char* k = std::getenv("LT_TEST_KILL_RANK_AT_STEP"); k && comm) {
      long long r = -1, s = -1;
      if (std::sscanf(k, "%lld:%lld", &r, &s) == 2 && r == rank && s == step) std::raise(SIGKILL);
    }
    loader.next_batch(cfg.grad_accum * rows, ids.data(), labels.data(), positions.data());
    if (document_mask) data::document_starts(doc_start.data(), positions.data(), cfg.grad_accum * rows, seq);
    int64_t predicted = 0;
    for (int64_t a = 0; a < cfg.grad_accum; ++a) predicted += count_predicted_tokens(labels.data() + a * rows * seq, rows, seq);
    const int32_t *step_ids = ids.data(), *step_labels = labels.data(), *step_doc_start = doc_start.data();
    if (comm) {
      take_rank_rows(rank_ids, ids, cfg.grad_accum, rows, seq, rank, ranks);
      take_rank_rows(rank_labels, labels, cfg.grad_accum, rows, seq, rank, ranks);
      if (document_mask) take_rank_rows(rank_doc_start, doc_start, cfg.grad_accum, rows, seq, rank, ranks);
      step_ids = rank_ids.data(), step_labels = rank_labels.data(), step_doc_start = rank_doc_start.data();
    }
    const StepEngine::Outcome o =
        engine->step(step_ids, step_labels, predicted, step, document_mask ? step_doc_start : nullptr);
    loss = o.loss;
    const UpdateResult& u = o.update;
    report_replans(o.replans);
    if (!u.applied)
      progress.message("step " + std::to_string(step) + ": non-finite gradients, step skipped (" +
                       std::to_string(updater.non_finite_in_a_row()) + " in a row)");
    tokens_seen += static_cast<double>(ids.size());
    train_seconds += seconds_since(t0);

    const double tps = static_cast<double>(ids.size()) * (step - start_step) / std::max(train_seconds, 1e-9);
    ProgressLine pl{step, cfg.steps, loss, u.lr, u.grad_norm, tps,
                    train_seconds / (step - start_step) * (cfg.steps - step)};
    pl.mfu = peak_flops > 0 ? step_flops * static_cast<double>(step - start_step) / train_seconds / peak_flops : -1;
    pl.compute_bytes = memory.compute;
    pl.host_bytes = memory.host;
    pl.nvme_bytes = memory.nvme;
    progress.step(pl, cfg.log_every > 0 && (step % cfg.log_every == 0 || step == cfg.steps));
    if (cfg.eval_every > 0 && step % cfg.eval_every == 0 && step != cfg.steps) evaluate(step);
    if (cfg.save_every > 0 && step % cfg.save_every == 0 && step != cfg.steps) save(step);
    summary.tokens_per_s = tps;
  }
  report_replans(engine->finish(cfg.steps));
  if (start_step < cfg.steps) {
    evaluate(cfg.steps);
    save(cfg.steps);
  } else {
    progress.message("the checkpoint is already at step " + std::to_string(start_step) + " of " +
                     std::to_string(cfg.steps) + "; nothing to train (raise --steps to continue)");
    last_checkpoint = *resume_from;
  }
  if (writer) progress.write_plot(plot_path, plot_title);
  summary.steps = cfg.steps;
  summary.final_loss = loss;
  summary.peak_compute_bytes = memory.compute;
  summary.peak_host_bytes = memory.host;
  summary.peak_nvme_bytes = memory.nvme;
  summary.peak_rss_bytes = peak_rss_bytes();
  summary.checkpoint_dir = last_checkpoint;
  std::printf("done: %lld steps in %s (%s training), final loss %.4f, %.0f tokens/s%s\n",
              static_cast<long long>(cfg.steps), format_duration(seconds_since(run_start)).c_str(),
              format_duration(train_seconds).c_str(), loss, summary.tokens_per_s,
              summary.eval_exact_match >= 0
                  ? (", eval exact match " + std::to_string(100 * summary.eval_exact_match).substr(0, 5) + "%").c_str()
                  : "");
  if (cfg.steps > start_step) {
    const std::string note = engine->step_time_note(
        train_seconds / static_cast<double>((cfg.steps - start_step) * cfg.grad_accum));
    if (!note.empty()) std::printf("%s\n", note.c_str());
  }
  summary.world_size = ranks;
  summary.optimizer_state_bytes = static_cast<int64_t>(updater.resident_state_bytes());
  if (comm && cfg.steps > start_step) {
    const double steps = static_cast<double>(cfg.steps - start_step);
    summary.collective_bytes_per_step = static_cast<double>(comm->bytes_sent() - setup_bytes_sent) / steps;
    const double total = comm->collective_seconds(), hidden = std::min(total, engine->overlapped_collective_seconds());
    summary.collective_hidden_frac = total > 0 ? hidden / total : 0;
    std::printf("data parallel: rank 0 sent %s per step to the other ranks; its collectives took %.3g s (%s of its "
                "%.3g s of training, waiting for the other ranks included), of which %.3g s (%s) ran under compute "
                "(sums under backward, weights under forward)\n",
                format_bytes(static_cast<int64_t>(summary.collective_bytes_per_step)).c_str(), total,
                format_percent(total / std::max(train_seconds, 1e-9)).c_str(), train_seconds, hidden,
                format_percent(summary.collective_hidden_frac).c_str());
  }
  if (!cfg.summary_json.empty() && writer) write_file_atomic(cfg.summary_json, summary.to_json().dump(2) + "\n");
  return summary;
}

}  // namespace lt
