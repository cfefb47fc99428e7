// config.json inputs that once escaped load_model_config as something other than an
// lt::Error naming the file (found by fuzz/model_config_fuzz).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "core/error.h"
#include "model/config.h"
#include "test_util.h"

namespace lt {
namespace {

std::string load_error(const std::string& text) {
  test::TempDir dir("config-malformed");
  const std::string path = dir.str() + "/config.json";
  std::ofstream(path, std::ios::binary) << text;
  try {
    (void)load_model_config(path);
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("(in " + path), std::string::npos) << msg;
    return msg;
  }
  ADD_FAILURE() << "no error for: " << text;
  return "";
}

// nlohmann reports a number too large for a double as out_of_range, not parse_error.
TEST(ModelConfigMalformed, NumberTooLargeForADouble) {
  const std::string msg = load_error(R"({"model_type": "llama", "rope_theta": 81e400})");
  EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;
  EXPECT_NE(msg.find("81e400"), std::string::npos) << msg;
}

// Sizes without an upper bound overflowed int64 in num_params() and the weight specs
// (signed overflow: undefined behaviour): hidden_size 2^62 with one head is a head_dim of
// 2^62 and a q projection of 2^124 elements.
TEST(ModelConfigMalformed, SizesPastWhatFitsInt64) {
  const std::string base = R"("model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 1,
                               "intermediate_size": 64, "vocab_size": 300)";
  std::string msg = load_error("{" + base + R"(, "hidden_size": 4611686018427387904})");
  EXPECT_NE(msg.find("field \"hidden_size\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("more than lazytrain supports"), std::string::npos) << msg;
  msg = load_error("{" + base + R"(, "hidden_size": 64, "head_dim": 4294967296})");
  EXPECT_NE(msg.find("field \"head_dim\""), std::string::npos) << msg;
  // Every factor within its bound, the product not: 16384 layers of width 2^20.
  msg = load_error(R"({"model_type": "llama", "num_hidden_layers": 16384, "num_attention_heads": 128,
                       "hidden_size": 1048576, "intermediate_size": 4194304, "vocab_size": 300})");
  EXPECT_NE(msg.find("parameters, more than lazytrain supports"), std::string::npos) << msg;
}

}  // namespace
}  // namespace lt
