// Fuzz target: a Hugging Face config.json (model/config.h, load_model_config).
//
// Input: the file's bytes. On success the harness uses the config the way planning and
// training start to: parameter count, the weight specs of the first and last layer, the
// RoPE frequencies, a sequence-length check and the config.json written back (which
// must parse back to the same config). Nothing is allocated per parameter.
// Finding: any crash, ASan/UBSan report, leak, hang, LT_ASSERT, an exception other than
// lt::Error (fuzz_util.h), or a written config that reads back different.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "model/config.h"
#include "model/layer_specs.h"
#include "model/rope_frequencies.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = lt::fuzz::scratch().write("config.json", data, size);
  lt::fuzz::expect_only_lt_error([&] {
    const lt::ModelConfig c = lt::load_model_config(path);
    volatile int64_t sink = c.num_params();
    sink = sink + static_cast<int64_t>(lt::embedding_weight_spec(c).shape.size());
    sink = sink + static_cast<int64_t>(lt::block_weight_specs(c, 0).size());
    sink = sink + static_cast<int64_t>(lt::block_weight_specs(c, c.num_layers - 1).size());
    sink = sink + static_cast<int64_t>(lt::head_weight_specs(c).size());
    sink = sink + static_cast<int64_t>(lt::rope_inv_freq(c).size());
    const nlohmann::json back = lt::model_config_to_json(c);
    const lt::ModelConfig again = lt::parse_model_config(back, "config written back");
    if (lt::model_config_to_json(again) != back)
      lt::fuzz::finding("config.json written back parses to another config:\n" + back.dump(1));
    (void)sink;
  });
  return 0;
}
