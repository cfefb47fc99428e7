// Shared setup for the planner's tests: requests for presets and profiles, and a tiny
// synthetic model for exhaustive checks.
#pragma once

#include <string>

#include <algorithm>
#include <vector>

#include "plan/cost_model.h"
#include "plan/model_preset.h"
#include "plan/plan.h"
#include "plan/plan_request.h"

namespace lt::test {

// Moves the first transfer of `tensor` on `link` to the plan's last window (a plan damaged
// on purpose, for the checks that must catch it); false when no window moves it.
inline bool move_to_last_window(Plan& p, const std::string& tensor, Link link) {
  for (Window& w : p.windows)
    for (auto t = w.transfers.begin(); t != w.transfers.end(); ++t)
      if (t->tensor == tensor && t->link == link) {
        const Transfer moved = *t;
        w.transfers.erase(t);
        p.windows.back().transfers.push_back(moved);
        return true;
      }
  return false;
}

// Keeps paged layer j's masters (and with them its gradients and bf16 copy: a slot's read
// is one prefix, the update writes a paged copy from the masters) or its gradients alone
// on the host: the plan's lists lose it, its os.<j> moves what paged_layer_bytes then says,
// its gs.<j> and cp.<j> transfers go. A plan with other layers' parts paged, for the
// executor's and the trainer's tests.
inline void keep_on_host(Plan& p, int j, bool masters) {
  const auto drop = [j](std::vector<int>& layers) {
    layers.erase(std::remove(layers.begin(), layers.end(), j), layers.end());
  };
  drop(p.nvme_grad_layers);
  if (masters) {
    drop(p.nvme_master_layers);
    drop(p.nvme_copy_layers);
  }
  const PagedLayerBytes bytes = paged_layer_bytes(p, j);
  const std::string js = std::to_string(j);
  for (Window& w : p.windows) {
    auto& t = w.transfers;
    const auto gone = [&](const Transfer& x) { return x.tensor == "gs." + js || (masters && x.tensor == "cp." + js); };
    t.erase(std::remove_if(t.begin(), t.end(), gone), t.end());
    for (Transfer& x : t)
      if (x.tensor == "os." + js) x.bytes = x.link == Link::NvmeRead ? bytes.read : bytes.write_back;
  }
}

inline PlanRequest preset_request(const std::string& model, const std::string& hardware, int64_t batch,
                                  int64_t seq = 1024) {
  PlanRequest req;
  ResolvedModel m = resolve_model(model);
  req.model_name = m.name;
  req.model = m.config;
  req.hardware = load_hardware_profile(hardware);
  req.batch = batch;
  req.seq = seq;
  return req;
}

// A small llama-shaped model with `layers` layers: tiny enough for exhaustive enumeration,
// with bytes and FLOPs in the same proportions as real decoders.
inline ModelConfig tiny_config(int layers) {
  ModelConfig c;
  c.model_type = "llama";
  c.hidden_size = 512;
  c.num_layers = layers;
  c.num_heads = 8;
  c.num_kv_heads = 4;
  c.head_dim = 64;
  c.intermediate_size = 1536;
  c.vocab_size = 4096;
  c.max_position_embeddings = 4096;
  c.torch_dtype = "bfloat16";
  return c;
}

// tiny_config as a Qwen3.5 hybrid: Gated DeltaNet layers, every 4th (1-based) gated full
// attention, partial RoPE; its DeltaNet layers are larger than its attention ones.
inline ModelConfig tiny_hybrid_config(int layers) {
  ModelConfig c = tiny_config(layers);
  c.model_type = "qwen3_5_text";
  c.qk_norm = true;
  c.attn_output_gate = true;
  c.partial_rotary_factor = 0.25;
  c.linear = {4, 8, 64, 96, 4};
  for (int j = 0; j < layers; ++j)
    c.layer_kinds.push_back((j + 1) % 4 == 0 ? LayerKind::Attention : LayerKind::LinearAttention);
  return c;
}

inline PlanRequest tiny_request(int layers, const std::string& hardware, int64_t batch, int64_t seq = 512) {
  PlanRequest req;
  req.model_name = "tiny" + std::to_string(layers);
  req.model = tiny_config(layers);
  req.hardware = load_hardware_profile(hardware);
  req.batch = batch;
  req.seq = seq;
  return req;
}

}  // namespace lt::test
