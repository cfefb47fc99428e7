// The trainer details of issue 14 that users trip on: clear errors instead of aborts for a
// bad output directory, model directory, tokenizer or size; a metrics log with each step
// once after resumes, and its SVG plot; checkpoint rotation that leaves nothing behind
// after a crash; a save on a full disk that keeps the previous checkpoint; and checkpoints
// whose special tokens and chat template transformers sees as lazytrain trained with.
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/jsonl_dataset.h"
#include "data/synthetic_arith.h"
#include "data/tokenizer.h"
#include "exec/backend_cuda.h"
#include "io/atomic_file.h"
#include "memory/nvme_test_util.h"
#include "train/checkpoints.h"
#include "train/hf_metadata.h"
#include "train/trainer.h"
#include "test_util.h"
#include "train_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace lt {
namespace {

using test::final_weights;
using test::tiny_config;

using CliResult = test::ShellResult;  // output: stdout and stderr

// Runs the lazytrain binary with `args` (shell-quoted here) and captures its output.
// `env`: NAME=value assignments put before the command.
CliResult run_cli(const std::vector<std::string>& args, const std::string& env = "") {
  // exec: the shell becomes lazytrain, so that a signal that kills it is what pclose sees.
  std::string cmd = env + " exec '" + std::string(LT_BINARY_DIR) + "/lazytrain' --threads 1";
  for (const std::string& a : args) cmd += " '" + a + "'";
  cmd += " 2>&1";
  return test::run_shell(cmd);
}

void expect_clear_error(const CliResult& r, std::initializer_list<std::string> parts) {
  EXPECT_EQ(r.exit_code, 1) << "signal " << r.signal << "\n" << r.output;
  EXPECT_NE(r.output.find("lazytrain: error: "), std::string::npos) << r.output;
  for (const std::string& p : parts) EXPECT_NE(r.output.find(p), std::string::npos) << "no '" << p << "' in:\n" << r.output;
}

const std::vector<std::string> kTinyTrain = {"train", "--scratch-hidden", "32", "--scratch-layers", "2",
                                             "--scratch-heads", "4", "--scratch-kv-heads", "2",
                                             "--scratch-intermediate", "64", "--seq-len", "64", "--batch", "2",
                                             "--steps", "2", "--warmup-steps", "0", "--synthetic-train-problems", "50",
                                             "--eval-problems", "0"};

std::vector<std::string> tiny_train(std::initializer_list<std::string> extra) {
  std::vector<std::string> a = kTinyTrain;
  a.insert(a.end(), extra);
  return a;
}

// A tiny Hugging Face-style model directory: config.json and weights from a 1-step run.
std::string make_model_dir(const test::TempDir& dir) {
  TrainConfig c = tiny_config(dir.str() + "/run");
  c.steps = 1;
  c.warmup_steps = 0;
  return run_training(c).checkpoint_dir;
}

TEST(TrainerErrors, OutputDirThatIsAFile) {
  ASSERT_TRUE(fs::exists(std::string(LT_BINARY_DIR) + "/lazytrain")) << "build the lazytrain binary";
  test::TempDir dir("out-is-file");
  const std::string file = dir.str() + "/taken";
  write_file_atomic(file, "x");
  expect_clear_error(run_cli(tiny_train({"--output-dir", file})), {file, "is an existing file", "--output-dir"});
}

TEST(TrainerErrors, ReadOnlyOutputDir) {
  test::TempDir dir("out-read-only");
  std::string why;
  auto mnt = test::ScratchMount::tmpfs(dir.path() / "mnt", 1 << 20, &why);
  if (!mnt) GTEST_SKIP() << why;
  if (const std::string ro = mnt->remount_read_only(); !ro.empty()) GTEST_SKIP() << ro;
  const std::string out = (mnt->path() / "run").string();
  expect_clear_error(run_cli(tiny_train({"--output-dir", out})), {out, "cannot create the output directory"});
  expect_clear_error(run_cli(tiny_train({"--output-dir", mnt->path().string()})),
                     {mnt->path().string(), "cannot write in the output directory"});
}

TEST(TrainerErrors, MissingModelDirectory) {
  test::TempDir dir("no-model");
  const std::string missing = dir.str() + "/no-such-model";
  expect_clear_error(run_cli({"train", "--model", missing, "--output-dir", dir.str() + "/out"}),
                     {missing, "does not exist"});
  expect_clear_error(run_cli({"generate", "--model", missing, "--prompt", "hi"}), {missing, "does not exist"});
  expect_clear_error(run_cli({"step", "--model", missing}), {missing, "does not exist"});
}

TEST(TrainerErrors, BadTokenizerNamesItsPath) {
  test::TempDir dir("bad-tokenizer");
  const std::string model = make_model_dir(dir);
  write_file_atomic(model + "/tokenizer.json", "{\"model\": 3");
  const CliResult r = run_cli({"train", "--model", model, "--output-dir", dir.str() + "/out", "--steps", "1"});
  expect_clear_error(r, {model + "/tokenizer.json"});
}

TEST(TrainerErrors, OddHeadDimIsAConfigError) {
  test::TempDir dir("odd-head-dim");
  const std::string model = make_model_dir(dir);
  json cfg = json::parse(read_text_file(model + "/config.json"));
  cfg["model_type"] = "qwen2";
  cfg["hidden_size"] = 88;
  cfg["num_attention_heads"] = 8;
  cfg["num_key_value_heads"] = 8;
  cfg.erase("head_dim");
  write_file_atomic(model + "/config.json", cfg.dump());
  expect_clear_error(run_cli({"step", "--model", model}), {model + "/config.json", "head_dim 11 is odd"});
  expect_clear_error(run_cli({"train", "--scratch-hidden", "44", "--scratch-heads", "4", "--scratch-kv-heads", "2",
                              "--output-dir", dir.str() + "/out"}),
                     {"scratch_hidden / scratch_heads = 11 is odd"});
}

TEST(TrainerErrors, StepSizesMustBePositive) {
  expect_clear_error(run_cli({"step", "--seq", "-5"}), {"--seq must be positive, got -5"});
  expect_clear_error(run_cli({"step", "--batch", "0"}), {"--batch must be positive, got 0"});
  expect_clear_error(run_cli({"step", "--steps", "-1"}), {"--steps must be positive"});
}

// Flags a user gets wrong: each is an error naming the key, before any work.
TEST(TrainerErrors, OutOfRangeFlags) {
  test::TempDir dir("bad-flags");
  const std::string out = dir.str() + "/out";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--beta1", "1.5"}, "beta1 is 1.5"},
      {{"--beta2", "-0.1"}, "beta2 is -0.1"},
      {{"--eps", "0"}, "eps must be positive"},
      {{"--weight-decay", "-1"}, "weight_decay is -1"},
      {{"--max-grad-norm", "-1"}, "max_grad_norm is -1"},
      {{"--min-lr-ratio", "2"}, "min_lr_ratio is 2"},
      {{"--max-new-tokens", "0"}, "max_new_tokens must be positive"},
      {{"--train-data", dir.str() + "/missing.jsonl"}, "the training data file does not exist"},
      {{"--eval-data", dir.str() + "/missing.jsonl"}, "the evaluation data file does not exist"},
      {{"--lr", "nan"}, "lr must be positive"},
      // Without a plan the run would train in memory on the CPU, whatever --backend says.
      {{"--backend", "emu"}, "backend emu runs the streaming executor, which needs a plan"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = {"train", "--output-dir", out, "--steps", "2", "--eval-problems", "0"};
    args.insert(args.end(), flags.begin(), flags.end());
    SCOPED_TRACE(flags[0]);
    expect_clear_error(run_cli(args), {message});
  }
  const std::string model = make_model_dir(dir);
  expect_clear_error(run_cli({"eval", "--model", model, "--problems", "-1"}), {"--problems must be positive"});
  expect_clear_error(run_cli({"generate", "--model", model, "--prompt", "hi", "--max-new-tokens", "-1"}),
                     {"--max-new-tokens must be positive"});
  expect_clear_error(run_cli({"plan", "--model", "qwen3.6-27b", "--gpu-cap", "-3"}), {"--gpu-cap must not be negative"});
  expect_clear_error(run_cli({"plan", "--model", "qwen3.6-27b", "--time-limit", "-1"}), {"--time-limit must be positive"});
  expect_clear_error(run_cli({"profile", "--dir", dir.str() + "/missing"}), {"does not exist", "--dir"});
  expect_clear_error(run_cli({"profile", "--backend", "emu", "--out", dir.str() + "/p.json"}),
                     {"unknown backend 'emu'", "--backend", "use cpu"});
  // Where the cuda backend cannot start (no CUDA in this build, or no GPU): the backend's
  // reason and fix, before any measuring; where it can, the run would profile the GPU.
  if (const std::string no_cuda = test::error_of([] { make_cuda_backend(); }); !no_cuda.empty())
    expect_clear_error(run_cli({"profile", "--backend", "cuda", "--out", dir.str() + "/p.json"}), {no_cuda});
}

std::vector<json> read_jsonl(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

// After two crashes and resumes, metrics.jsonl holds each step once, with the values of an
// uninterrupted run (bitwise: the resumed runs recompute the same steps).
TEST(TrainerMetrics, EachStepOnceAfterResumes) {
  test::TempDir a("metrics-straight"), b("metrics-resumed");
  const std::vector<std::string> args = {"train", "--scratch-hidden", "32", "--scratch-layers", "2",
                                         "--scratch-heads", "4", "--scratch-kv-heads", "2",
                                         "--scratch-intermediate", "64", "--seq-len", "64", "--batch", "2",
                                         "--steps", "20", "--warmup-steps", "3", "--synthetic-train-problems",
                                         "300", "--eval-problems", "0", "--save-every", "5", "--log-every", "1",
                                         "--keep-checkpoints", "5", "--output-dir"};
  auto with = [&](const test::TempDir& out, std::initializer_list<std::string> extra) {
    std::vector<std::string> v = args;
    v.push_back(out.str());
    v.insert(v.end(), extra);
    return v;
  };
  ASSERT_EQ(run_cli(with(a, {})).exit_code, 0);
  // Killed while saving step 15 (steps 1..15 logged, checkpoint 10 complete), resumed and
  // killed while saving step 20 (checkpoint 15 complete), resumed to the end.
  EXPECT_EQ(run_cli(with(b, {}), "LT_TEST_KILL_DURING_SAVE=15").signal, SIGKILL);
  EXPECT_EQ(run_cli(with(b, {"--resume"}), "LT_TEST_KILL_DURING_SAVE=20").signal, SIGKILL);
  ASSERT_EQ(run_cli(with(b, {"--resume"})).exit_code, 0);
  const int64_t steps = 20;

  const std::vector<json> want = read_jsonl(a.str() + "/metrics.jsonl");
  const std::vector<json> got = read_jsonl(b.str() + "/metrics.jsonl");
  std::vector<int64_t> logged;
  for (const json& r : got) logged.push_back(r["step"]);
  std::vector<int64_t> expected(steps);
  for (int64_t i = 0; i < steps; ++i) expected[i] = i + 1;
  EXPECT_EQ(logged, expected);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i]["loss"].get<double>(), want[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(got[i]["lr"].get<double>(), want[i]["lr"].get<double>()) << "step " << i + 1;
  }

  // The plot shows all 20 logged steps: one polyline per panel with a point per step.
  const std::string svg = read_text_file(b.str() + "/metrics.svg");
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  size_t lines = 0, pos = 0;
  while ((pos = svg.find("<polyline", pos)) != std::string::npos) {
    const size_t start = svg.find("points='", pos) + 8, end = svg.find('\'', start);
    size_t points = 0;
    for (size_t i = start; i < end; ++i) points += svg[i] == ',';
    EXPECT_EQ(points, static_cast<size_t>(steps));
    ++lines;
    pos = end;
  }
  EXPECT_EQ(lines, 2u);
}

// The first step trains at the peak when there is no warmup (it used to train at the
// cosine's value for t = 1/N: the floor for a one-step run).
TEST(TrainerMetrics, NoWarmupStartsAtThePeak) {
  test::TempDir dir("no-warmup");
  TrainConfig c = tiny_config(dir.str());
  c.warmup_steps = 0;
  c.steps = 1;
  c.lr = 0.1;
  c.log_every = 1;
  run_training(c);
  const std::vector<json> m = read_jsonl(dir.str() + "/metrics.jsonl");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0]["lr"].get<double>(), 0.1);
}

// MFU in the step line and the metrics log: the model's training FLOPs per second over the
// profile's peak, recomputed here from the architecture (forward matmuls 2 FLOPs per MAC
// per token, attention's QK^T and PV over the causal triangle, backward twice forward).
TEST(TrainerMetrics, MfuAgainstTheProfilesPeak) {
  test::TempDir dir("mfu");
  TrainConfig c = tiny_config(dir.str());
  c.log_every = 1;
  c.steps = 4;
  c.warmup_steps = 0;
  c.precision = "f32";
  c.hardware = std::string(LT_SOURCE_DIR) + "/profiles/h800.json";
  run_training(c);
  const double L = c.scratch_layers, C = c.scratch_hidden, I = c.scratch_intermediate, H = c.scratch_heads,
               KV = c.scratch_kv_heads * (C / H), S = c.seq_len, B = c.batch;
  const double V = json::parse(read_text_file(dir.str() + "/checkpoint-000004/config.json"))["vocab_size"];
  const double forward_per_token = 2 * (L * (2 * C * C + 2 * C * KV + 3 * C * I) + C * V) + L * 2 * 2 * H * (C / H) * (S + 1) / 2;
  const double peak = 989e12;  // profiles/h800.json peak_tflops (its fp32 rate: no bf16 field)
  const std::vector<json> m = read_jsonl(dir.str() + "/metrics.jsonl");
  ASSERT_EQ(m.size(), 4u);
  for (const json& r : m) {
    ASSERT_TRUE(r.contains("mfu")) << r.dump();
    const double want = 3 * forward_per_token * r["tokens_per_s"].get<double>() / peak;
    EXPECT_NEAR(r["mfu"].get<double>(), want, 1e-12 * want + 1e-300) << r.dump() << " B " << B;
  }
}

// A damaged trainer or optimizer state (a float, negative or huge count) is an error naming
// the file and key; a float step used to convert with undefined behaviour and train from
// step -9e18 (found by fuzz/trainer_state_fuzz).
TEST(TrainerCheckpoints, DamagedStateCountsAreErrors) {
  test::TempDir dir("damaged-state");
  TrainConfig c = tiny_config(dir.str());
  c.steps = 2;
  c.warmup_steps = 0;
  const std::string ckpt = run_training(c).checkpoint_dir;
  const std::string ts = ckpt + "/trainer_state.json", os = ckpt + "/optimizer_state.json";
  const json trainer_state = json::parse(read_text_file(ts)), optimizer_state = json::parse(read_text_file(os));
  c.steps = 4;
  c.resume = true;
  for (const json& bad : {json(1e300), json(-3), json(2.5), json("2")}) {
    json st = trainer_state;
    st["step"] = bad;
    write_file_atomic(ts, st.dump());
    try {
      run_training(c);
      ADD_FAILURE() << "no error for step " << bad.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(ts + " (step)"), std::string::npos) << e.what();
    }
  }
  write_file_atomic(ts, trainer_state.dump());
  json st = optimizer_state;
  st["optimizer_steps"] = 1e300;
  write_file_atomic(os, st.dump());
  try {
    run_training(c);
    ADD_FAILURE() << "no error for optimizer_steps 1e300";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(os + " (optimizer_steps)"), std::string::npos) << e.what();
  }
}

void make_checkpoint(const fs::path& dir, bool done) {
  fs::create_directories(dir);
  write_file_atomic((dir / "config.json").string(), "{}");
  if (done) write_file_atomic((dir / "DONE").string(), "1\n");
}

// What kills at the wrong moment leave: a half-deleted checkpoint (no DONE), a hidden
// rotation or save leftover, one checkpoint more than kept, and a complete save that was
// not yet renamed into place. The next run cleans up and keeps the newest ones.
TEST(TrainerCheckpoints, CleanUpAfterCrashes) {
  test::TempDir dir("ckpt-cleanup");
  const fs::path d = dir.path();
  make_checkpoint(d / "checkpoint-000002", true);
  make_checkpoint(d / "checkpoint-000004", false);  // killed while being deleted
  make_checkpoint(d / "checkpoint-000006", true);
  make_checkpoint(d / "checkpoint-000008", true);  // killed before rotation: 3 complete, keep 2
  make_checkpoint(d / ".checkpoint-000001.old", false);
  make_checkpoint(d / ".checkpoint-000009.tmp", false);  // killed while writing
  clean_up_checkpoints(d.string(), 2);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(d)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"checkpoint-000006", "checkpoint-000008"}));

  // A complete save whose rename did not happen (it was replacing a same-step checkpoint).
  make_checkpoint(d / ".checkpoint-000010.tmp", true);
  clean_up_checkpoints(d.string(), 2);
  EXPECT_EQ(newest_complete_checkpoint(d.string()), (d / "checkpoint-000010").string());
  EXPECT_FALSE(fs::exists(d / ".checkpoint-000010.tmp"));
  EXPECT_FALSE(fs::exists(d / "checkpoint-000006"));
}

// A full output disk during a save: an error naming the file being written, the partial
// checkpoint removed (the space is free again), and the previous checkpoint still usable.
TEST(TrainerCheckpoints, FullDiskDuringSaveKeepsThePreviousCheckpoint) {
  test::TempDir scratch("ckpt-full-disk");
  std::string why;
  auto mnt = test::ScratchMount::tmpfs(scratch.path() / "mnt", 4 << 20, &why);
  if (!mnt) GTEST_SKIP() << why;
  TrainConfig c = tiny_config(mnt->path().string());
  c.steps = 4;
  c.warmup_steps = 1;
  c.save_every = 2;
  c.keep_checkpoints = 3;
  const fs::path filler = mnt->path() / "filler";
  // Fill the disk once checkpoint 2 exists, leaving less than a checkpoint's bytes.
  TrainConfig first = c;
  first.steps = 2;
  run_training(first);
  const std::string saved = *newest_complete_checkpoint(mnt->path().string());
  const std::vector<float> saved_weights = final_weights(saved);
  size_t ckpt_bytes = 0;
  for (const auto& e : fs::directory_iterator(saved)) ckpt_bytes += fs::file_size(e.path());
  const fs::space_info space = fs::space(mnt->path());
  ASSERT_GT(space.available, ckpt_bytes) << "the scratch disk should hold another checkpoint before it is filled";
  {
    std::ofstream f(filler, std::ios::binary);
    std::vector<char> block(64 << 10, 1);
    for (size_t left = space.available - ckpt_bytes / 2; left > 0;) {
      const size_t n = std::min(left, block.size());
      f.write(block.data(), static_cast<std::streamsize>(n));
      left -= n;
    }
  }
  c.resume = true;
  std::string msg;
  try {
    run_training(c);
  } catch (const Error& e) {
    msg = e.what();
  }
  ASSERT_FALSE(msg.empty()) << "the save on a full disk did not fail";
  EXPECT_NE(msg.find(mnt->path().string() + "/.checkpoint-000004.tmp/"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No space left on device"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(mnt->path() / ".checkpoint-000004.tmp")) << "the partial save was not removed";
  EXPECT_EQ(newest_complete_checkpoint(mnt->path().string()), saved);
  const std::vector<float> after = final_weights(saved);
  ASSERT_EQ(after.size(), saved_weights.size());
  EXPECT_EQ(0, std::memcmp(after.data(), saved_weights.data(), after.size() * sizeof(float)));
  // With space again, the run resumes from it and finishes.
  fs::remove(filler);
  EXPECT_NO_THROW(run_training(c));
  EXPECT_EQ(newest_complete_checkpoint(mnt->path().string()), (mnt->path() / "checkpoint-000004").string());
}

// transformers' Auto classes see the special tokens and the chat template lazytrain
// trained with: a from-scratch run on chat messages (chatml) with the synthetic tokenizer.
TEST(TrainerCheckpoints, TransformersSeesTheTrainedSpecialTokensAndChatTemplate) {
  test::TempDir dir("hf-special");
  const json tok_json = data::synthetic_tokenizer_json({});
  write_file_atomic(dir.str() + "/tokenizer.json", tok_json.dump());
  const std::vector<json> conversations = {
      {{{"role", "system"}, {"content", "You add numbers."}},
       {{"role", "user"}, {"content", "What is 2 plus 3?"}},
       {{"role", "assistant"}, {"content", "5"}}},
      {{{"role", "user"}, {"content", "Mia has 12 pens. She gets 7 more."}},
       {{"role", "assistant"}, {"content", "19"}},
       {{"role", "user"}, {"content", "And 1 more?"}},
       {{"role", "assistant"}, {"content", "20"}}}};
  {
    std::ofstream f(dir.path() / "chat.jsonl");
    for (int i = 0; i < 20; ++i) f << json{{"messages", conversations[i % 2]}}.dump() << "\n";
  }
  TrainConfig c = tiny_config(dir.str() + "/out");
  c.steps = 2;
  c.warmup_steps = 0;
  c.train_data = dir.str() + "/chat.jsonl";
  c.tokenizer = dir.str() + "/tokenizer.json";
  const TrainSummary s = run_training(c);
  write_file_atomic(dir.str() + "/conversations.json", json(conversations).dump());

  const auto r = test::run_reference_script("train_hf_special_tokens.py",
                                            "'" + s.checkpoint_dir + "' '" + dir.str() + "/conversations.json'");
  ASSERT_PYTHON_OK(r);
  const json hf = json::parse(r.output.substr(r.output.rfind("\n{") == std::string::npos ? 0 : r.output.rfind("\n{") + 1));
  const data::Tokenizer tok = data::Tokenizer::from_json_text(tok_json.dump(), "synthetic");
  const int32_t eos = *tok.token_to_id("<|endoftext|>"), im_end = *tok.token_to_id("<|im_end|>");
  EXPECT_EQ(hf["eos_token"], "<|endoftext|>");
  EXPECT_EQ(hf["eos_token_id"], eos);
  EXPECT_EQ(hf["pad_token"], "<|endoftext|>");
  EXPECT_EQ(hf["config_eos"], eos);
  EXPECT_EQ(hf["generation_eos"], json({eos, im_end})) << "generate() must stop where the trained turns end";
  EXPECT_EQ(hf["model_max_length"], c.seq_len);

  // The chat template renders exactly the tokens the trainer trained on.
  data::DatasetOptions o;
  o.format = data::DatasetFormat::kMessages;
  o.chat_template = data::ChatTemplate::kChatml;
  std::vector<json> records;
  for (const json& m : conversations) records.push_back({{"messages", m}});
  const data::Dataset ours = data::Dataset::from_records(records, "conversations", tok, o);
  ASSERT_EQ(hf["chat"].size(), conversations.size());
  for (size_t i = 0; i < conversations.size(); ++i) {
    const std::span<const int32_t> ids = ours.ids(i);
    EXPECT_EQ(hf["chat"][i]["ids"].get<std::vector<int32_t>>(), std::vector<int32_t>(ids.begin(), ids.end()))
        << hf["chat"][i]["text"];
    const std::string prompt = hf["chat"][i]["generation_prompt"];
    EXPECT_TRUE(prompt.ends_with("<|im_end|>\n<|im_start|>assistant\n")) << "no assistant turn opened: " << prompt;
  }
}

// Fine-tuning a model that has its own generation_config.json and tokenizer_config.json:
// their other keys survive, the stop list keeps the model's ids and gains the run's.
TEST(TrainerCheckpoints, FineTuneKeepsTheModelsOwnGenerationAndTokenizerSettings) {
  test::TempDir dir("hf-carry-over");
  const std::string model = make_model_dir(dir);
  const data::Tokenizer tok = data::Tokenizer::from_file(model + "/tokenizer.json");
  const int32_t eos = data::resolve_eos_id(tok, ""), im_end = *tok.token_to_id("<|im_end|>");
  write_file_atomic(model + "/generation_config.json",
                    json{{"temperature", 0.7}, {"top_p", 0.8}, {"eos_token_id", {im_end}}}.dump());
  write_file_atomic(model + "/tokenizer_config.json",
                    json{{"tokenizer_class", "Qwen2Tokenizer"}, {"padding_side", "left"}}.dump());
  const HfMetadata meta = make_hf_metadata(tok, model, std::nullopt, 256);
  const std::string out = dir.str() + "/ckpt";
  fs::create_directories(out);
  fs::copy_file(model + "/config.json", out + "/config.json");
  write_hf_metadata(meta, out);
  const json gen = json::parse(read_text_file(out + "/generation_config.json"));
  EXPECT_EQ(gen["temperature"], 0.7);
  EXPECT_EQ(gen["top_p"], 0.8);
  EXPECT_EQ(gen["eos_token_id"], json({im_end, eos}));
  const json tc = json::parse(read_text_file(out + "/tokenizer_config.json"));
  EXPECT_EQ(tc["tokenizer_class"], "Qwen2Tokenizer");
  EXPECT_EQ(tc["padding_side"], "left");
  EXPECT_EQ(tc["eos_token"], tok.id_to_token(eos));
  EXPECT_EQ(json::parse(read_text_file(out + "/config.json"))["eos_token_id"], eos);
  // A malformed source file is an error, not silently dropped settings.
  write_file_atomic(model + "/generation_config.json", "{\"temperature\": ");
  EXPECT_THROW(make_hf_metadata(tok, model, std::nullopt, 256), Error);
}

// The default task (question/answer, no chat): eos and the generation config, no template.
TEST(TrainerCheckpoints, TransformersSeesTheEosOfAFromScratchRun) {
  test::TempDir dir("hf-eos");
  TrainConfig c = tiny_config(dir.str());
  c.steps = 1;
  c.warmup_steps = 0;
  const TrainSummary s = run_training(c);
  const json tc = json::parse(read_text_file(s.checkpoint_dir + "/tokenizer_config.json"));
  EXPECT_FALSE(tc.contains("chat_template")) << "no chat was trained";
  const auto r = test::run_reference_script("train_hf_special_tokens.py", "'" + s.checkpoint_dir + "'");
  ASSERT_PYTHON_OK(r);
  const json hf = json::parse(r.output.substr(r.output.rfind("\n{") == std::string::npos ? 0 : r.output.rfind("\n{") + 1));
  const data::Tokenizer tok = data::Tokenizer::from_file(s.checkpoint_dir + "/tokenizer.json");
  const int32_t eos = data::resolve_eos_id(tok, "");
  EXPECT_EQ(hf["eos_token"], tok.id_to_token(eos));
  EXPECT_EQ(hf["generation_eos"], json({eos}));
  EXPECT_EQ(hf["config_eos"], eos);
}

}  // namespace
}  // namespace lt
