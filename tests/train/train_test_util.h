// Shared by the trainer's tests: a tiny from-scratch run and reading its checkpoints.
#pragma once

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/parameters.h"
#include "train/train_config.h"

namespace lt::test {

// Small enough to train 20 steps in about a second.
inline TrainConfig tiny_config(const std::string& out) {
  TrainConfig c;
  c.output_dir = out;
  c.scratch_hidden = 32;
  c.scratch_layers = 2;
  c.scratch_heads = 4;
  c.scratch_kv_heads = 2;
  c.scratch_intermediate = 64;
  c.seq_len = 64;
  c.batch = 2;
  c.steps = 20;
  c.warmup_steps = 3;
  c.synthetic_train_problems = 300;
  c.eval_problems = 0;
  c.log_every = 0;
  c.keep_checkpoints = 5;
  return c;
}

inline std::vector<float> final_weights(const std::string& checkpoint) {
  const ModelConfig mc = load_model_config(checkpoint);
  ModelParameters p(mc);
  load_parameters(p, checkpoint);
  return std::vector<float>(p.data(), p.data() + p.numel());
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace lt::test
