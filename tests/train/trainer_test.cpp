// The trainer end to end on a tiny model: exact resume, crash safety of checkpoints,
// checkpoints that transformers loads, and the non-finite guard.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/jsonl_dataset.h"
#include "data/tokenizer.h"
#include "kernels/cpu/sum_of_squares.h"
#include "layers/generator.h"
#include "model/checkpoint.h"
#include "test_util.h"
#include "train/checkpoints.h"
#include "train/evaluate.h"
#include "train/trainer.h"
#include "train/updater.h"
#include "train_test_util.h"

extern char** environ;

namespace lt {
namespace {

using test::final_weights;
using test::read_file;
using test::tiny_config;

TEST(Trainer, ResumeIsBitwiseExact) {
  for (const std::string optimizer : {"adamw8", "adamw", "sgd"}) {
    test::TempDir a("resume-straight"), b("resume-split");
    TrainConfig straight = tiny_config(a.str());
    straight.optimizer = optimizer;
    const TrainSummary s1 = run_training(straight);

    // 10 steps, a checkpoint, then the rest from that checkpoint: the first run goes on
    // to step 20, whose checkpoint is removed so that --resume starts from step 10.
    TrainConfig first = tiny_config(b.str());
    first.optimizer = optimizer;
    first.save_every = 10;
    run_training(first);
    std::filesystem::remove_all(b.path() / "checkpoint-000020");
    TrainConfig second = first;
    second.resume = true;
    const TrainSummary s2 = run_training(second);

    EXPECT_EQ(s1.final_loss, s2.final_loss) << optimizer;
    const std::vector<float> w1 = final_weights(s1.checkpoint_dir), w2 = final_weights(s2.checkpoint_dir);
    ASSERT_EQ(w1.size(), w2.size());
    EXPECT_EQ(0, std::memcmp(w1.data(), w2.data(), w1.size() * sizeof(float))) << optimizer;
    if (optimizer != "sgd") {
      EXPECT_EQ(read_file(s1.checkpoint_dir + "/optimizer.bin"), read_file(s2.checkpoint_dir + "/optimizer.bin"))
          << optimizer;
    }
  }
}

// Runs `lazytrain train` as a child process with extra environment; returns its wait status.
int run_lazytrain(const std::vector<std::string>& args, const std::string& env_extra) {
  std::vector<std::string> argv_s = {std::string(LT_BINARY_DIR) + "/lazytrain"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
  if (!env_extra.empty()) env_s.push_back(env_extra);
  std::vector<char*> envp;
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST(Trainer, KillDuringSaveLeavesPreviousCheckpointUsable) {
  ASSERT_TRUE(std::filesystem::exists(std::string(LT_BINARY_DIR) + "/lazytrain")) << "build the lazytrain binary";
  test::TempDir dir("kill-in-save");
  const std::vector<std::string> args = {
      "--threads", "1", "train", "--output-dir", dir.str(), "--scratch-hidden", "32", "--scratch-layers", "2",
      "--scratch-heads", "4", "--scratch-kv-heads", "2", "--scratch-intermediate", "64", "--seq-len", "64",
      "--batch", "2", "--steps", "20", "--warmup-steps", "3", "--synthetic-train-problems", "300",
      "--eval-problems", "0", "--save-every", "10", "--keep-checkpoints", "5"};
  // SIGKILL arrives with checkpoint 20's weights and optimizer state written, before DONE.
  const int status = run_lazytrain(args, "LT_TEST_KILL_DURING_SAVE=20");
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  const auto newest = newest_complete_checkpoint(dir.str());
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(std::filesystem::path(*newest).filename(), "checkpoint-000010");
  EXPECT_TRUE(std::filesystem::exists(dir.path() / ".checkpoint-000020.tmp")) << "the half-written save";
  EXPECT_NO_THROW(final_weights(*newest));

  // Resuming finishes the run, and matches an uninterrupted one bit for bit.
  std::vector<std::string> resume_args = args;
  resume_args.push_back("--resume");
  ASSERT_EQ(run_lazytrain(resume_args, ""), 0);
  EXPECT_FALSE(std::filesystem::exists(dir.path() / ".checkpoint-000020.tmp"));
  test::TempDir straight("kill-straight");
  std::vector<std::string> straight_args = args;
  straight_args[4] = straight.str();
  ASSERT_EQ(run_lazytrain(straight_args, ""), 0);
  const auto w1 = final_weights((dir.path() / "checkpoint-000020").string());
  const auto w2 = final_weights((straight.path() / "checkpoint-000020").string());
  ASSERT_EQ(w1.size(), w2.size());
  EXPECT_EQ(0, std::memcmp(w1.data(), w2.data(), w1.size() * sizeof(float)));
}

TEST(Trainer, TransformersLoadsCheckpointAndGeneratesTheSameTokens) {
  test::TempDir dir("hf-load");
  TrainConfig c = tiny_config(dir.str());
  c.steps = 30;
  const TrainSummary s = run_training(c);
  const ModelConfig mc = load_model_config(s.checkpoint_dir);
  ModelParameters params(mc);
  load_parameters(params, s.checkpoint_dir);
  const data::Tokenizer tok = data::Tokenizer::from_file(s.checkpoint_dir + "/tokenizer.json");
  const std::vector<int32_t> prompt = qa_prompt_ids(tok, "Mia has 12 pens. She gets 7 more. How many pens does Mia have now?");
  const int32_t eos = data::resolve_eos_id(tok, "");
  const int64_t max_new = 12;
  Generator gen(mc, static_cast<int64_t>(prompt.size()) + max_new, Precision::F32);
  const std::vector<int32_t> ours = gen.generate(params, prompt, max_new, {eos});

  std::string ids;
  for (int32_t t : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(t);
  const test::PythonResult py = test::run_reference_script(
      "train_hf_generate.py", s.checkpoint_dir + " " + ids + " " + std::to_string(max_new) + " " + std::to_string(eos));
  ASSERT_PYTHON_OK(py);
  const auto j = nlohmann::json::parse(py.output.substr(py.output.rfind('{')));
  EXPECT_EQ(j.at("ids").get<std::vector<int32_t>>(), ours);
}

TEST(Updater, NonFiniteGradientsSkipTheStepAndAbortAfterThree) {
  TrainConfig c = tiny_config("unused");
  ModelConfig mc;
  mc.model_type = "llama";
  mc.hidden_size = 8;
  mc.num_layers = 1;
  mc.num_heads = 2;
  mc.num_kv_heads = 1;
  mc.head_dim = 4;
  mc.intermediate_size = 16;
  mc.vocab_size = 11;
  mc.max_position_embeddings = 16;
  ModelParameters params(mc), grads(mc);
  init_parameters(params, 3);
  for (int64_t i = 0; i < grads.numel(); ++i) grads.data()[i] = 0.01f;
  Updater u(c, params);
  EXPECT_TRUE(u.apply(params, grads, sum_of_squares_f64(grads.data(), grads.numel()), nullptr, 1).applied);
  const std::vector<float> before(params.data(), params.data() + params.numel());
  grads.data()[5] = NAN;
  for (int k = 1; k <= 2; ++k) {
    const UpdateResult r = u.apply(params, grads, sum_of_squares_f64(grads.data(), grads.numel()), nullptr, 1 + k);
    EXPECT_FALSE(r.applied);
    EXPECT_EQ(0, std::memcmp(before.data(), params.data(), before.size() * sizeof(float)));
  }
  EXPECT_THROW(u.apply(params, grads, sum_of_squares_f64(grads.data(), grads.numel()), nullptr, 4), Error);
  EXPECT_EQ(0, std::memcmp(before.data(), params.data(), before.size() * sizeof(float)));
  EXPECT_EQ(u.optimizer_steps(), 1);
}

TEST(TrainConfig, YamlErrorsNameFileLineAndKey) {
  test::TempDir dir("yaml");
  const std::string path = dir.str() + "/c.yaml";
  std::ofstream(path) << "steps: 5\nbatch: 3\nlearning_rate: 0.1\n";
  TrainConfig c;
  try {
    apply_yaml_config(c, path);
    FAIL() << "unknown key accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("learning_rate"), std::string::npos) << e.what();
  }
  std::ofstream(path) << "steps: many\n";
  EXPECT_THROW(apply_yaml_config(c, path), Error);
  std::ofstream(path) << "steps: 5\nbatch: 3\noptimizer: sgd\nmodel: \"\"\n";
  apply_yaml_config(c, path);
  EXPECT_EQ(c.steps, 5);
  EXPECT_EQ(c.batch, 3);
  EXPECT_EQ(c.optimizer, "sgd");
  // describe() writes YAML that reads back to the same config.
  std::ofstream(path) << describe(c);
  TrainConfig back;
  apply_yaml_config(back, path);
  EXPECT_EQ(describe(back), describe(c));
}

TEST(Trainer, GradientAccumulationMatchesOneLargeBatch) {
  // Two micro-batches of 2 rows with every token weighted equally give the gradient of
  // one 4-row batch: the same update up to fp32 summation order. After 3 SGD steps the
  // weights agree to within a few ulps of their magnitude.
  test::TempDir a("accum-a"), b("accum-b");
  TrainConfig big = tiny_config(a.str());
  big.optimizer = "sgd";
  big.precision = "f32";
  big.steps = 3;
  big.batch = 4;
  TrainConfig small = big;
  small.output_dir = b.str();
  small.batch = 2;
  small.grad_accum = 2;
  const TrainSummary s1 = run_training(big), s2 = run_training(small);
  EXPECT_NEAR(s1.final_loss, s2.final_loss, 1e-5 * s1.final_loss);
  const auto w1 = final_weights(s1.checkpoint_dir), w2 = final_weights(s2.checkpoint_dir);
  double num = 0, den = 0;
  for (size_t i = 0; i < w1.size(); ++i) num += (w1[i] - w2[i]) * double(w1[i] - w2[i]), den += w1[i] * double(w1[i]);
  // fp32 rounding of gradients (relative ~1e-6 each) times the step size: far below 1e-5.
  EXPECT_LE(std::sqrt(num / den), 1e-5);
}

}  // namespace
}  // namespace lt
