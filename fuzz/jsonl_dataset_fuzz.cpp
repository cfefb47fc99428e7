// Fuzz target: JSONL datasets in every record format (data/jsonl_dataset.h,
// Dataset::load_jsonl; data/dataset_format.h renders the records): text,
// prompt_completion, alpaca, gsm8k, messages (chatml and llama3 templates), and auto.
//
// Input: byte 0 picks the options, the rest is the .jsonl file.
//   bits 0-2: format: 0 auto, 1 text, 2 prompt_completion, 3 alpaca, 4 gsm8k, 5 messages,
//             6-7 auto;   bit 3: chat template llama3 (else chatml);
//   bit 4: train_on_prompt;   bit 5: skip_bad_lines;   bit 6: eos_token "</s>" (which
//   the tokenizer lacks: an lt::Error) instead of the default.
// The tokenizer is the synthetic task's byte-level BPE (data/synthetic_arith.h), built
// once. On success every document is checked (labels as long as ids, ids in the
// vocabulary, labels either -100 or the id) and packed into a few rows (data/packing.h).
// Finding: any crash, ASan/UBSan report, leak, hang, LT_ASSERT, an exception other than
// lt::Error (fuzz_util.h), or a document that breaks the checks above.
#include <cstdint>
#include <string>
#include <vector>

#include "data/jsonl_dataset.h"
#include "data/packing.h"
#include "data/synthetic_arith.h"
#include "data/tokenizer.h"
#include "fuzz_util.h"

namespace {

const lt::data::Tokenizer& tokenizer() {
  static const lt::data::Tokenizer t = lt::data::Tokenizer::from_json_text(
      lt::data::synthetic_tokenizer_json(lt::data::ArithmeticTaskOptions{}, 300).dump(), "synthetic tokenizer");
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  using lt::data::DatasetFormat;
  const uint8_t opt_byte = data[0];
  constexpr DatasetFormat kFormats[8] = {DatasetFormat::kAuto,  DatasetFormat::kText,     DatasetFormat::kPromptCompletion,
                                         DatasetFormat::kAlpaca, DatasetFormat::kGsm8k,   DatasetFormat::kMessages,
                                         DatasetFormat::kAuto,  DatasetFormat::kAuto};
  lt::data::DatasetOptions opt;
  opt.format = kFormats[opt_byte & 7];
  opt.chat_template = (opt_byte & 8) ? lt::data::ChatTemplate::kLlama3 : lt::data::ChatTemplate::kChatml;
  opt.train_on_prompt = opt_byte & 16;
  opt.skip_bad_lines = opt_byte & 32;
  if (opt_byte & 64) opt.eos_token = "</s>";
  const lt::data::Tokenizer& tok = tokenizer();
  const std::string path = lt::fuzz::scratch().write("data.jsonl", data + 1, size - 1);
  lt::fuzz::expect_only_lt_error([&] {
    const lt::data::Dataset d = lt::data::Dataset::load_jsonl(path, tok, opt);
    for (size_t i = 0; i < d.size(); ++i) {
      const auto ids = d.ids(i);
      const auto labels = d.labels(i);
      if (ids.size() != labels.size()) lt::fuzz::finding("document " + std::to_string(i) + ": ids and labels differ in length");
      for (size_t k = 0; k < ids.size(); ++k) {
        if (ids[k] < 0 || ids[k] >= tok.vocab_size()) lt::fuzz::finding("id outside the vocabulary");
        if (labels[k] != lt::data::kIgnoreLabel && labels[k] != ids[k]) lt::fuzz::finding("label is neither -100 nor the id");
      }
    }
    lt::data::LoaderOptions lo;
    lo.seq_len = 16;
    lo.mode = (opt_byte & 128) ? lt::data::PackMode::kPad : lt::data::PackMode::kPack;
    lt::data::PackedLoader loader(d, lo);
    for (int r = 0; r < 3; ++r) (void)loader.next();
  });
  return 0;
}
