// Fuzz target: the YAML train config (`lazytrain train --config FILE`;
// train/train_config.h, apply_yaml_config, then describe and validate).
//
// Input: the YAML file's bytes. On success the harness prints the config as the trainer
// does (describe, the text saved as a checkpoint's train_config.yaml), reads that text
// back, and checks that it describes the same config again; then runs validate.
// Finding: any crash, ASan/UBSan report, leak, hang, LT_ASSERT, an exception other than
// lt::Error (fuzz_util.h; YAML::Exception and nlohmann::json errors included), or a
// printed config that does not read back to itself.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "train/train_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = lt::fuzz::scratch().write("train.yaml", data, size);
  lt::fuzz::expect_only_lt_error([&] {
    lt::TrainConfig cfg;
    lt::apply_yaml_config(cfg, path);
    const std::string text = lt::describe(cfg);
    const std::string again_path = lt::fuzz::scratch().write("described.yaml", text);
    lt::TrainConfig again;
    try {
      lt::apply_yaml_config(again, again_path);
    } catch (const lt::Error& e) {
      lt::fuzz::finding(std::string("describe() wrote a config that does not read back: ") + e.what() + "\n" + text);
    }
    if (lt::describe(again) != text)
      lt::fuzz::finding("describe() wrote a config that reads back different:\n" + text + "---\n" + lt::describe(again));
    lt::validate(cfg);
  });
  return 0;
}
