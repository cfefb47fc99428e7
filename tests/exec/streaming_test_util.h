// Shared setup for the streaming executor's tests: a tiny llama, a CPU hardware profile
// under which NVMe offload is cheap and recompute is dear (so the MILP uses NVMe), and
// deterministic data.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/parameters.h"
#include "plan/hardware_profile.h"

namespace lt::test {

inline ModelConfig streaming_tiny_config(int layers = 4) {
  ModelConfig c;
  c.model_type = "llama";
  c.hidden_size = 64;
  c.num_layers = layers;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 128;
  c.vocab_size = 256;
  c.max_position_embeddings = 128;
  c.rms_norm_eps = 1e-5;
  c.torch_dtype = "float32";
  return c;
}

// streaming_tiny_config as a Qwen3.5 hybrid with these layer kinds: Gated DeltaNet layers
// (2 key, 4 value heads of 8 and 12 channels, conv 4) and gated full-attention layers with
// q/k norms and partial RoPE 0.25.
inline ModelConfig qwen3_5_tiny_config(const std::vector<LayerKind>& kinds) {
  ModelConfig c = streaming_tiny_config(static_cast<int>(kinds.size()));
  c.model_type = "qwen3_5_text";
  c.qk_norm = true;
  c.norm_weight_offset = 1.0;
  c.attn_output_gate = true;
  c.partial_rotary_factor = 0.25;
  c.linear = {2, 4, 8, 12, 4};
  c.layer_kinds = kinds;
  return c;
}

// Rates chosen so that every tier is worth using at this size: slow compute, fast links.
inline HardwareProfile streaming_cpu_profile() {
  HardwareProfile p;
  p.name = "streaming-test-cpu";
  p.backend = "cpu";
  p.act_bytes = 2;
  p.weight_bytes = 4;  // the cpu and emu executors keep weights and gradients in fp32
  p.grad_bytes = 4;
  p.compute_memory_bytes = 1e9;
  p.default_cap_bytes = 1e9;
  p.peak_flops = 2e8;
  p.efficiency = 1;
  p.h2d_bw = p.d2h_bw = 2e10;
  p.nvme_read_bw = p.nvme_write_bw = 1e10;
  p.nvme_capacity_bytes = 1e9;
  p.host_memory_bytes = 1e10;
  p.host_optimizer_params_per_s = 1e10;
  p.host_memory_bw = 2e10;
  return p;
}

// Uniform in [-scale, scale) from a 64-bit LCG: the same numbers on every machine.
inline void fill_uniform(float* x, int64_t n, float scale, uint64_t seed) {
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = scale * (static_cast<float>(s >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f);
  }
}

inline void init_parameters(ModelParameters& p, uint64_t seed) {
  fill_uniform(p.data(), p.numel(), 0.08f, seed);
  for (const WeightSpec& s : p.specs())
    if (s.hf_name.find("norm") != std::string::npos) {
      float* w = p.tensor(s.hf_name);
      for (int64_t i = 0; i < s.numel(); ++i) w[i] = 1.0f + 0.1f * w[i];
    }
}

// Token ids and labels for step `step`; every seventh label is -100.
inline void make_batch(std::vector<int32_t>& ids, std::vector<int32_t>& labels, int64_t tokens, int64_t vocab,
                       uint64_t step) {
  ids.resize(tokens);
  labels.resize(tokens);
  uint64_t s = 0x9e3779b97f4a7c15ull ^ (step + 1) * 0xbf58476d1ce4e5b9ull;
  for (int64_t i = 0; i < tokens; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    ids[i] = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(vocab));
  }
  for (int64_t i = 0; i < tokens; ++i) labels[i] = i % 7 == 3 ? -100 : ids[i];
}

}  // namespace lt::test
