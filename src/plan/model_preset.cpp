#include "plan/model_preset.h"

#include <filesystem>

#include "core/error.h"

namespace lt {

ResolvedModel resolve_model(const std::string& preset_or_path) {
  namespace fs = std::filesystem;
  if (fs::exists(preset_or_path)) return {preset_or_path, load_model_config(preset_or_path)};
  for (const fs::path& dir : {fs::path(LT_SOURCE_DIR) / "presets", fs::path("presets")}) {
    fs::path f = dir / (preset_or_path + ".json");
    if (fs::exists(f)) return {preset_or_path, load_model_config(f.string())};
  }
  throw Error("unknown model '" + preset_or_path + "'", "--model",
              "give a preset (qwen2.5-3b, qwen2.5-7b, qwen2.5-14b, qwen3.6-27b, llama-3.1-8b, "
              "llama-3.1-70b), a config.json, or a Hugging Face model directory");
}

}  // namespace lt
