// `lazytrain step`: the whole-model step on a tiny generated model (or a Hugging Face
// directory), a few plain SGD steps on a synthetic counting task, printing the loss and
// the gradient norm of each step. It is the main job until the trainer lands.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/threads.h"
#include "kernels/cpu/sum_of_squares.h"
#include "layers/model_step.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "train/updater.h"

namespace lt::cli {

namespace {

struct StepOptions {
  std::string model_dir;  // empty: generate the tiny default model
  std::string precision = "bf16";
  int64_t batch = 8, seq = 64;
  int steps = 30;
  float lr = 0.3f;
  uint64_t seed = 1;
};

ModelConfig tiny_default_config() {
  ModelConfig c;
  c.model_type = "llama";
  c.hidden_size = 128;
  c.num_layers = 4;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.intermediate_size = 344;
  c.vocab_size = 256;
  c.max_position_embeddings = 1024;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  return c;
}

void run(const StepOptions& o) {
  const Precision p = o.precision == "bf16" ? Precision::BF16 : Precision::F32;
  if (o.precision != "bf16" && o.precision != "f32")
    throw Error("unknown precision '" + o.precision + "'", "--precision", "use f32 or bf16");
  for (const auto& [flag, value] : {std::pair<const char*, int64_t>{"--batch", o.batch}, {"--seq", o.seq}, {"--steps", o.steps}})
    if (value <= 0) throw Error(std::string(flag) + " must be positive, got " + std::to_string(value), flag, "");
  if (!(o.lr > 0) || !std::isfinite(o.lr)) throw Error("--lr must be a positive number", "--lr", "");
  if (!o.model_dir.empty()) check_model_dir(o.model_dir, "--model");
  const ModelConfig c = o.model_dir.empty() ? tiny_default_config() : load_model_config(o.model_dir);
  ModelParameters params(c);
  if (o.model_dir.empty())
    init_parameters(params, o.seed);
  else
    load_parameters(params, o.model_dir);
  ModelParameters grads(c);
  ModelStep step(c, o.batch, o.seq, p);

  std::printf("lazytrain step: %s, %lld layers, hidden %lld, %.2fM parameters, batch %lld x seq %lld, %s, %d threads\n",
              o.model_dir.empty() ? "generated tiny llama" : o.model_dir.c_str(),
              static_cast<long long>(c.num_layers), static_cast<long long>(c.hidden_size),
              params.numel() / 1e6, static_cast<long long>(o.batch), static_cast<long long>(o.seq),
              o.precision.c_str(), num_threads());
  std::printf("task: continue a sequence that counts up by a fixed stride modulo the vocabulary\n");
  std::printf("%6s %10s %12s %12s\n", "step", "loss", "grad norm", "tokens/s");

  // Each sequence starts at a random token and counts with a random stride in 1..4, so
  // the next token is predictable from the previous two.
  std::mt19937_64 rng(o.seed);
  std::vector<int32_t> ids(o.batch * o.seq);
  for (int s = 0; s < o.steps; ++s) {
    for (int64_t b = 0; b < o.batch; ++b) {
      const int64_t start = rng() % c.vocab_size, stride = 1 + rng() % 4;
      for (int64_t t = 0; t < o.seq; ++t) ids[b * o.seq + t] = static_cast<int32_t>((start + stride * t) % c.vocab_size);
    }
    const auto t0 = std::chrono::steady_clock::now();
    step.refresh_compute_copy(params);
    grads.zero();
    const StepResult r = step.forward_backward(params, grads, ids.data(), ids.data());
    const double norm = std::sqrt(sum_of_squares_f64(grads.data(), grads.numel()));
    if (!std::isfinite(r.loss) || !std::isfinite(norm))
      throw Error("non-finite loss or gradient at step " + std::to_string(s + 1), "lazytrain step",
                  "lower --lr");
    // Plain SGD with global-norm clipping at 1.0 (the optimizers live in optim/).
    const float scale = o.lr * static_cast<float>(std::min(1.0, 1.0 / (norm + 1e-6)));
    float* w = params.data();
    const float* g = grads.data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < params.numel(); ++i) w[i] -= scale * g[i];
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%6d %10.4f %12.4f %12.0f\n", s + 1, r.loss, norm, o.batch * o.seq / dt);
  }
}

}  // namespace

void add_step_command(CLI::App& app) {
  auto opts = std::make_shared<StepOptions>();
  auto* cmd = app.add_subcommand(
      "step", "Forward + backward of the whole model: a few SGD steps on a synthetic task");
  cmd->add_option("--model", opts->model_dir, "Hugging Face model directory (default: a generated tiny llama)");
  cmd->add_option("--precision", opts->precision, "f32 or bf16 (bf16 matmul inputs, fp32 accumulation)");
  cmd->add_option("--batch", opts->batch, "sequences per step");
  cmd->add_option("--seq", opts->seq, "tokens per sequence");
  cmd->add_option("--steps", opts->steps, "number of steps");
  cmd->add_option("--lr", opts->lr, "SGD learning rate");
  cmd->add_option("--seed", opts->seed, "random seed");
  cmd->callback([opts] { run(*opts); });
}

}  // namespace lt::cli
