// Resolves --model: a preset name (presets/<name>.json in the source tree or the working
// directory), a config.json file, or a Hugging Face model directory.
#pragma once

#include <string>

#include "model/config.h"

namespace lt {

struct ResolvedModel {
  std::string name;  // the preset name, or the file/directory given
  ModelConfig config;
};

ResolvedModel resolve_model(const std::string& preset_or_path);

}  // namespace lt
