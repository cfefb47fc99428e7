#include "model/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/checkpoint_dir.h"
#include "io/safetensors_writer.h"

namespace lt {

namespace {

// Where the checkpoint stores a text model's tensor: under its own name, or (a gemma3
// multimodal checkpoint, whose language model this config is) transformers 5's
// model.language_model.X for model.X, or 4.x's language_model.X. "" if none.
std::string stored_name(const CheckpointDir& ckpt, const std::string& name) {
  if (ckpt.contains(name)) return name;
  const std::string model = "model.";
  if (name.compare(0, model.size(), model) == 0) {
    const std::string v5 = "model.language_model." + name.substr(model.size());
    if (ckpt.contains(v5)) return v5;
  }
  if (ckpt.contains("language_model." + name)) return "language_model." + name;
  return "";
}

}  // namespace

void load_parameters(ModelParameters& params, const std::string& dir) {
  CheckpointDir ckpt(dir);
  for (const WeightSpec& spec : params.specs()) {
    const std::string name = stored_name(ckpt, spec.hf_name);
    if (name.empty())
      throw Error("tensor '" + spec.hf_name + "' is missing", ckpt.path(),
                  "the checkpoint does not match its config.json (model_type, layers, biases)");
    const TensorView v = ckpt.tensor(name);
    if (v.shape != spec.shape)
      throw Error("tensor '" + spec.hf_name + "' has shape " + shape_str(v.shape) + ", config says " +
                      shape_str(spec.shape),
                  ckpt.path(), "the checkpoint does not match its config.json");
    if (v.dtype != DType::F32 && v.dtype != DType::BF16 && v.dtype != DType::F16)
      throw Error("tensor '" + spec.hf_name + "' has dtype " + std::string(dtype_name(v.dtype)),
                  ckpt.path(), "weights must be F32, BF16 or F16");
    convert_to_f32(params.tensor(spec.hf_name), v.data, v.dtype, static_cast<size_t>(v.numel()));
  }
}

void check_model_dir(const std::string& dir, const std::string& where) {
  std::error_code ec;
  const std::string fix = "give a Hugging Face model directory (config.json, *.safetensors, tokenizer.json)";
  if (!std::filesystem::exists(dir, ec)) throw Error("the model directory " + dir + " does not exist", where, fix);
  if (!std::filesystem::is_directory(dir, ec)) throw Error(dir + " is a file, not a model directory", where, fix);
  if (!std::filesystem::exists(std::filesystem::path(dir) / "config.json", ec))
    throw Error("the model directory " + dir + " has no config.json", where, fix);
}

void save_pretrained(const ModelParameters& params, const std::string& dir, uint64_t max_shard_bytes) {
  std::filesystem::create_directories(dir);
  ModelConfig c = params.config();
  c.torch_dtype = "float32";
  {
    const std::string path = dir + "/config.json";
    std::ofstream f(path);
    f << model_config_to_json(c).dump(2) << "\n";
    if (!f.good()) throw Error("could not write config.json", path, "check the disk and permissions");
  }
  std::vector<NamedTensor> tensors;
  for (const WeightSpec& spec : params.specs())
    tensors.push_back({spec.hf_name, TensorView{const_cast<float*>(params.tensor(spec.hf_name)),
                                                DType::F32, spec.shape}});
  save_safetensors_sharded(dir, tensors, max_shard_bytes);
}

void init_parameters(ModelParameters& params, uint64_t seed, float init_std) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, init_std);
  for (const WeightSpec& spec : params.specs()) {
    float* p = params.tensor(spec.hf_name);
    const bool is_norm = spec.hf_name.find("norm") != std::string::npos;
    const bool is_bias = spec.hf_name.size() > 5 && spec.hf_name.substr(spec.hf_name.size() - 5) == ".bias";
    // Norms start at a scale of 1: weight 1, or 0 where the norm adds 1 (Gemma).
    const float norm_init = static_cast<float>(1.0 - params.config().norm_weight_offset);
    for (int64_t i = 0; i < spec.numel(); ++i) p[i] = is_norm ? norm_init : is_bias ? 0.0f : normal(rng);
  }
}

}  // namespace lt
