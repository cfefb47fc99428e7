// Fuzz target: a Hugging Face tokenizer.json (data/tokenizer.h, Tokenizer::from_json_text:
// normalizer, pre-tokenizer, BPE model, added tokens, post-processor, decoder).
//
// Input: the tokenizer.json text, optionally followed by a 0 byte and a text to encode
// (the input up to the first 0 byte is the JSON). On success the harness encodes that
// text and a fixed one (ASCII, digits, multi-byte UTF-8, an invalid byte, the special
// tokens), decodes the ids with and without special tokens, and looks every id up.
// Finding: any crash, ASan/UBSan report, leak, hang, LT_ASSERT, an exception other than
// lt::Error (fuzz_util.h), or an id from encode outside [0, vocab_size()).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"
#include "fuzz_util.h"

namespace {

void exercise(const lt::data::Tokenizer& t, std::string_view text) {
  for (bool special : {true, false}) {
    const std::vector<int32_t> ids = t.encode(text, special);
    for (int32_t id : ids)
      if (id < 0 || id >= t.vocab_size())
        lt::fuzz::finding("encode gave id " + std::to_string(id) + ", vocab_size is " + std::to_string(t.vocab_size()));
    (void)t.decode(ids, false);
    (void)t.decode(ids, true);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string json(input.substr(0, nul));
  const std::string_view text = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  lt::fuzz::expect_only_lt_error([&] {
    const lt::data::Tokenizer t = lt::data::Tokenizer::from_json_text(json, "fuzz/tokenizer.json");
    exercise(t, text);
    exercise(t, "Hello, world! 12345 +-*/ \xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80  <|endoftext|><|im_start|>x\n");
    for (const auto& a : t.added_tokens()) exercise(t, a.content);
    const int32_t n = std::min<int32_t>(t.vocab_size(), 4096);
    for (int32_t id = -1; id <= n; ++id) {
      const std::string s = t.id_to_token(id);
      (void)t.is_special(id);
      if (!s.empty()) (void)t.token_to_id(s);
    }
    exercise(t, "bad UTF-8: \xff\xfe\xc3");  // last: it may throw lt::Error
  });
  return 0;
}
