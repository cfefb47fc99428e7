// lt::Error messages: the three parts, and a NUL quoted from the input does not cut them.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace lt {
namespace {

TEST(Error, HasWhatWhereAndFix) {
  EXPECT_STREQ(Error("bad value", "config.json, field \"x\"", "fix it").what(),
               "bad value (in config.json, field \"x\"): fix it");
  EXPECT_STREQ(Error("bad value", "train config", "").what(), "bad value (in train config)");
}

// Found by the fuzz targets (safetensors_index_fuzz, trainer_state_fuzz,
// train_config_yaml_fuzz): a shard name, an optimizer name or a YAML key holding "\u0000"
// was quoted into the message, and what() ended there, before the place and the fix.
TEST(Error, NulQuotedFromTheInputKeepsThePlaceAndTheFix) {
  const std::string name("adamw8\0x", 8);
  const Error e("checkpoint was written by optimizer '" + name + "'", "optimizer_state.json", "resume with it");
  EXPECT_STREQ(e.what(), "checkpoint was written by optimizer 'adamw8\\0x' (in optimizer_state.json): resume with it");
  EXPECT_STREQ(Error(std::string("a\0\0b", 4)).what(), "a\\0\\0b");
}

}  // namespace
}  // namespace lt
