// The YAML train config (`lazytrain train --config`): malformed files end in an lt::Error
// naming the file, line and key. Cases found by fuzz/train_config_yaml_fuzz.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "core/error.h"
#include "test_util.h"
#include "train/train_config.h"

namespace lt {
namespace {

std::string load_error(const std::string& yaml) {
  test::TempDir dir("train-yaml");
  const std::string path = dir.str() + "/train.yaml";
  std::ofstream(path, std::ios::binary) << yaml;
  TrainConfig cfg;
  try {
    apply_yaml_config(cfg, path);
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("(in " + path), std::string::npos) << msg;
    return msg;
  }
  ADD_FAILURE() << "no error for:\n" << yaml;
  return "";
}

// A string that is not UTF-8 got into the config, and describe() (the printout, and the
// checkpoint's train_config.yaml) then threw nlohmann's type_error.316.
TEST(TrainConfigYaml, StringThatIsNotUtf8) {
  const std::string msg = load_error("steps: 3\noutput_dir: \"runs/\x91\x91\"\n");
  EXPECT_NE(msg.find("not valid UTF-8"), std::string::npos) << msg;
  EXPECT_NE(msg.find(":2 (output_dir)"), std::string::npos) << msg;
  // nlohmann's check is the strict one: an overlong '/' and a UTF-16 surrogate are out too.
  EXPECT_NE(load_error("tokenizer: \"\xc0\xaf\"\n").find("not valid UTF-8"), std::string::npos);
  EXPECT_NE(load_error("tokenizer: \"\xed\xa0\x80\"\n").find("not valid UTF-8"), std::string::npos);
}

// A key that is a sequence or a map threw YAML::TypedBadConversion past the loader.
TEST(TrainConfigYaml, KeyThatIsNotAName) {
  EXPECT_NE(load_error("? [steps, lr]\n: 3\n").find("a key is not a plain name"), std::string::npos);
  EXPECT_NE(load_error("{steps: 3, {a: 1}: 2}\n").find("a key is not a plain name"), std::string::npos);
}

// "min_lr_ratio: .nan" (the fuzzer's input, whole) loaded, and describe() then wrote
// "nan", which YAML does not read back as a number.
TEST(TrainConfigYaml, NumberThatIsNotFinite) {
  EXPECT_NE(load_error("min_lr_ratio: .nan\n").find("value of 'min_lr_ratio' is not a finite number"),
            std::string::npos);
  EXPECT_NE(load_error("steps: 2\nlr: -.inf\n").find(":2 (lr)"), std::string::npos);
}

TEST(TrainConfigYaml, DescribedConfigReadsBack) {
  test::TempDir dir("train-yaml-back");
  TrainConfig cfg;
  cfg.output_dir = "runs/caf\xc3\xa9";
  cfg.steps = 7;
  const std::string path = dir.str() + "/described.yaml";
  std::ofstream(path) << describe(cfg);
  TrainConfig again;
  apply_yaml_config(again, path);
  EXPECT_EQ(describe(again), describe(cfg));
  EXPECT_EQ(again.output_dir, cfg.output_dir);
}

}  // namespace
}  // namespace lt
