// JSONL datasets: every format, loss masks on responses only, chat templates, bad lines.
// Uses the synthetic task's small tokenizer (byte-level BPE) so no Python is needed.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "data/bpe_trainer.h"
#include "data/jsonl_dataset.h"
#include "data/synthetic_arith.h"
#include "test_util.h"

namespace lt::data {
namespace {

using nlohmann::json;

const Tokenizer& tok() {
  static const Tokenizer t = Tokenizer::from_json_text(synthetic_tokenizer_json({}).dump(), "test tokenizer");
  return t;
}

// Decodes the trained tokens of a document (labels != -100), in order.
std::string trained_text(const Dataset& d, size_t doc) {
  std::vector<int32_t> ids;
  auto labels = d.labels(doc);
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] != kIgnoreLabel) {
      EXPECT_EQ(labels[i], d.ids(doc)[i]) << "labels must equal ids where trained";
      ids.push_back(labels[i]);
    }
  return tok().decode(ids);
}

std::string all_text(const Dataset& d, size_t doc) {
  auto ids = d.ids(doc);
  return tok().decode(std::vector<int32_t>(ids.begin(), ids.end()));
}

Dataset one(const json& record, DatasetOptions opt = {}) {
  return Dataset::from_records({record}, "test", tok(), opt);
}

TEST(Dataset, TextTrainsEverythingButTheFirstToken) {
  Dataset d = one({{"text", "Tom has 3 apples."}});
  EXPECT_EQ(d.stats().format, DatasetFormat::kText);
  EXPECT_EQ(all_text(d, 0), "Tom has 3 apples.<|endoftext|>");
  EXPECT_EQ(d.labels(0)[0], kIgnoreLabel);
  EXPECT_EQ(d.ids(0).back(), *tok().token_to_id("<|endoftext|>"));
  EXPECT_EQ(d.labels(0).back(), d.ids(0).back()) << "EOS is trained";
  EXPECT_EQ(d.stats().trained_tokens, d.ids(0).size() - 1);
}

TEST(Dataset, PromptCompletionTrainsOnlyTheCompletion) {
  Dataset d = one({{"prompt", "2 + 2 ="}, {"completion", " 4"}});
  EXPECT_EQ(d.stats().format, DatasetFormat::kPromptCompletion);
  EXPECT_EQ(trained_text(d, 0), " 4<|endoftext|>");
  DatasetOptions all;
  all.train_on_prompt = true;
  Dataset d2 = one({{"prompt", "2 + 2 ="}, {"completion", " 4"}}, all);
  EXPECT_EQ(d2.stats().trained_tokens, d2.ids(0).size() - 1);
}

TEST(Dataset, AlpacaWithAndWithoutInput) {
  Dataset d = one({{"instruction", "Add."}, {"input", "2 and 3"}, {"output", "5"}});
  EXPECT_EQ(d.stats().format, DatasetFormat::kAlpaca);
  EXPECT_EQ(all_text(d, 0), alpaca_prompt("Add.", "2 and 3") + "5<|endoftext|>");
  EXPECT_NE(all_text(d, 0).find("### Input:\n2 and 3"), std::string::npos);
  EXPECT_EQ(trained_text(d, 0), "5<|endoftext|>");
  Dataset d2 = one({{"instruction", "Say hi."}, {"output", "hi"}});
  EXPECT_EQ(all_text(d2, 0).find("### Input"), std::string::npos);
}

TEST(Dataset, Gsm8k) {
  Dataset d = one({{"question", "Tom has 3 apples. He gets 4 more. How many apples does Tom have now?"},
                   {"answer", "3 + 4 = 7\n#### 7"}});
  EXPECT_EQ(d.stats().format, DatasetFormat::kGsm8k);
  EXPECT_EQ(trained_text(d, 0), "3 + 4 = 7\n#### 7<|endoftext|>");
  // The prompt tokens are exactly what generation will see.
  auto prompt = tok().encode(gsm8k_prompt("Tom has 3 apples. He gets 4 more. How many apples does Tom have now?"),
                             false);
  auto ids = d.ids(0);
  ASSERT_GT(ids.size(), prompt.size());
  EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), ids.begin()));
}

TEST(Dataset, ChatmlMessages) {
  json r = {{"messages",
             {{{"role", "system"}, {"content", "Be brief."}},
              {{"role", "user"}, {"content", "Hi"}},
              {{"role", "assistant"}, {"content", "Hello"}},
              {{"role", "user"}, {"content", "Bye"}},
              {{"role", "assistant"}, {"content", "Bye!"}}}}};
  Dataset d = one(r);
  EXPECT_EQ(d.stats().format, DatasetFormat::kMessages);
  EXPECT_EQ(all_text(d, 0),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\nBye!<|im_end|>\n");
  EXPECT_EQ(trained_text(d, 0), "Hello<|im_end|>Bye!<|im_end|>");
  // The special tokens are single tokens, not spelled out.
  auto ids = d.ids(0);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *tok().token_to_id("<|im_start|>")), 5);
}

TEST(Dataset, Llama3TemplateNeedsItsTokens) {
  json r = {{"messages", {{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Yo"}}}}};
  DatasetOptions o;
  o.chat_template = ChatTemplate::kLlama3;
  try {
    one(r, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("<|begin_of_text|>"), std::string::npos) << e.what();
  }
}

TEST(Dataset, Llama3TemplateRendering) {
  // A tokenizer with the Llama 3 special tokens, built the same way.
  BpeTrainerOptions bo;
  bo.vocab_size = 0;
  bo.special_tokens = {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                       "<|eot_id|>"};
  Tokenizer t = Tokenizer::from_json_text(train_byte_level_bpe({}, bo).dump(), "llama3-like");
  json r = {{"messages", {{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Yo"}}}}};
  DatasetOptions o;
  o.chat_template = ChatTemplate::kLlama3;
  Dataset d = Dataset::from_records({r}, "test", t, o);
  auto ids = d.ids(0);
  EXPECT_EQ(t.decode(std::vector<int32_t>(ids.begin(), ids.end())),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nYo<|eot_id|>");
  std::vector<int32_t> trained;
  for (size_t i = 0; i < ids.size(); ++i)
    if (d.labels(0)[i] != kIgnoreLabel) trained.push_back(ids[i]);
  EXPECT_EQ(t.decode(trained), "Yo<|eot_id|>");
}

TEST(Dataset, ExplicitFormatOverridesDetection) {
  DatasetOptions o;
  o.format = DatasetFormat::kText;
  Dataset d = one({{"text", "abc"}, {"prompt", "p"}, {"completion", "c"}}, o);
  EXPECT_EQ(all_text(d, 0), "abc<|endoftext|>");
}

TEST(Dataset, BadLineNamesFileAndLine) {
  test::TempDir dir("dataset-bad");
  const std::string path = dir.str() + "/d.jsonl";
  std::ofstream(path) << "{\"text\": \"ok\"}\n\n{\"text\": \"ok\"}\n{\"text\": 5}\n{broken\n{\"text\": \"ok\"}\n";
  try {
    Dataset::load_jsonl(path, tok(), {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("\"text\" is not a string"), std::string::npos) << e.what();
  }
  DatasetOptions skip;
  skip.skip_bad_lines = true;
  Dataset d = Dataset::load_jsonl(path, tok(), skip);
  EXPECT_EQ(d.size(), 3u);
  EXPECT_EQ(d.stats().skipped, 2u);
  EXPECT_EQ(d.stats().lines, 5u);
  ASSERT_EQ(d.stats().skipped_examples.size(), 2u);
  EXPECT_NE(d.stats().skipped_examples[1].find(path + ":5"), std::string::npos);
  EXPECT_NE(d.stats().skipped_examples[1].find("invalid JSON"), std::string::npos);
}

TEST(Dataset, MissingKeysAndEmptyResponses) {
  EXPECT_THROW(one({{"foo", 1}}), Error);
  DatasetOptions o;
  o.format = DatasetFormat::kGsm8k;
  EXPECT_THROW(one({{"question", "q"}}, o), Error);
  EXPECT_THROW(one({{"messages", json::array()}}), Error);
  EXPECT_THROW(one({{"messages", {{{"role", "user"}, {"content", "only a question"}}}}}), Error);
  EXPECT_THROW(Dataset::load_jsonl("/nonexistent.jsonl", tok(), {}), Error);
}

TEST(Dataset, EosTokenChoice) {
  DatasetOptions o;
  o.eos_token = "<|im_end|>";
  Dataset d = one({{"text", "x"}}, o);
  EXPECT_EQ(d.ids(0).back(), *tok().token_to_id("<|im_end|>"));
  o.eos_token = "<nope>";
  EXPECT_THROW(one({{"text", "x"}}, o), Error);
}

}  // namespace
}  // namespace lt::data

namespace lt::data {
namespace {

TEST(Dataset, TokenizerBosIsAddedAndNeverTrained) {
  BpeTrainerOptions bo;
  bo.vocab_size = 0;
  bo.special_tokens = {"<|begin_of_text|>", "<|end_of_text|>"};
  json j = train_byte_level_bpe({}, bo);
  j["post_processor"] = json::parse(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [], "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [0], "tokens": ["<|begin_of_text|>"]}}})");
  Tokenizer t = Tokenizer::from_json_text(j.dump(), "bos");
  EXPECT_EQ(t.encode("a"), (std::vector<int32_t>{0, 2 + 'a'}));
  Dataset d = Dataset::from_records({{{"prompt", "q"}, {"completion", "a"}}}, "test", t, {});
  auto ids = d.ids(0);
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.end()), (std::vector<int32_t>{0, 2 + 'q', 2 + 'a', 1}));
  auto labels = d.labels(0);
  EXPECT_EQ(std::vector<int32_t>(labels.begin(), labels.end()),
            (std::vector<int32_t>{kIgnoreLabel, kIgnoreLabel, 2 + 'a', 1}));
}

}  // namespace
}  // namespace lt::data
