// One process, one configuration: times the whole-model training step (forward +
// backward, no optimizer) of the model in MODEL_DIR and prints one JSON line with the
// median step time and this process's peak RSS. bench/train_step_bench.py runs it beside
// PyTorch on the same model and prints the comparison; this program is its worker.
//
//   train_step_bench MODEL_DIR f32|bf16 BATCH SEQ STEPS [gemm]
// With "gemm", it instead measures the bf16 GEMM rate (oneDNN) at the model's MLP shape.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/measure.h"
#include "core/threads.h"
#include "kernels/cpu/matmul.h"
#include "layers/model_step.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/hybrid_layers.h"
#include "train/bf16_gemm_paths.h"

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int measure_gemm(const lt::ModelConfig& c, int64_t tokens, int reps) {
  const int64_t M = tokens, K = c.hidden_size, N = c.intermediate_size;
  std::vector<float> a(M * K, 0.5f), b(N * K, 0.25f), out(M * N);
  std::vector<double> times;
  for (int r = 0; r < reps + 2; ++r) {
    const double t0 = now_s();
    lt::matmul(out.data(), a.data(), false, b.data(), true, M, N, K, false, lt::Precision::BF16);
    if (r >= 2) times.push_back(now_s() - t0);
  }
  const double flops = 2.0 * M * N * K;
  std::printf("{\"gemm_bf16_gflops\": %.2f, \"impl\": \"%s\", \"isa\": \"%s\", \"cpu\": \"%s\"}\n",
              flops / lt::median(times) / 1e9, lt::matmul_impl_name(M, N, K, lt::Precision::BF16).c_str(),
              std::string(lt::isa_name(lt::active_isa())).c_str(), lt::cpu_summary().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s MODEL_DIR f32|bf16 BATCH SEQ STEPS [gemm]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1], prec = argv[2];
  const int64_t batch = std::atoll(argv[3]), seq = std::atoll(argv[4]);
  const int steps = std::atoi(argv[5]);
  lt::set_num_threads(0);
  try {
    // The bf16 GEMM paths `lazytrain train` takes here: this machine's profile's faster
    // ones per layout when profiles/local.json measured this CPU, else measured now (or the
    // rule where oneDNN has no bf16 matmul of its own).
    lt::choose_bf16_gemm_paths("local", nullptr, "", prec == "bf16");
    const lt::ModelConfig c = lt::load_model_config(dir);
    if (argc > 6 && std::string(argv[6]) == "gemm") return measure_gemm(c, batch * seq, steps);
    const lt::Precision p = prec == "bf16" ? lt::Precision::BF16 : lt::Precision::F32;
    lt::ModelParameters params(c);
    lt::load_parameters(params, dir);
    lt::ModelParameters grads(c);
    lt::ModelStep step(c, batch, seq, p);
    step.refresh_compute_copy(params);

    std::mt19937 rng(7);
    std::vector<int32_t> ids(batch * seq);
    for (auto& t : ids) t = static_cast<int32_t>(rng() % c.vocab_size);
    std::vector<double> times;
    double loss = 0;
    for (int s = 0; s < steps + 1; ++s) {  // the first step warms the primitive caches
      const double t0 = now_s();
      grads.zero();
      loss = step.forward_backward(params, grads, ids.data(), ids.data()).loss;
      if (s > 0) times.push_back(now_s() - t0);
    }
    double layer_flops = 0;  // each layer's own (a hybrid model's layers differ)
    for (int64_t j = 0; j < c.num_layers; ++j) layer_flops += lt::layer_forward_flops(c, j, batch, seq);
    const double flops = 3.0 * (layer_flops + lt::head_forward_flops(c, batch, seq));
    std::printf("{\"step_s\": %.6f, \"tokens_per_s\": %.2f, \"peak_rss\": %.0f, \"loss\": %.6f, "
                "\"model_flops_per_step\": %.6g, \"threads\": %d, \"bf16_gemm\": %s}\n",
                lt::median(times), batch * seq / lt::median(times), static_cast<double>(lt::peak_rss_bytes()), loss, flops,
                lt::num_threads(), lt::bf16_gemm_paths_in_use().dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_step_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
