#include "train/hf_metadata.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "data/jsonl_dataset.h"
#include "io/atomic_file.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace lt {

namespace {

// A source file as JSON, or {} when it is absent. A malformed one is an error: silently
// dropping it would lose the model's settings.
json read_optional_json(const std::string& dir, const char* name) {
  if (dir.empty()) return json::object();
  const std::string path = dir + "/" + name;
  std::error_code ec;
  if (!fs::exists(path, ec)) return json::object();
  try {
    json j = json::parse(read_text_file(path));
    if (j.is_object()) return j;
  } catch (const json::exception&) {
  }
  throw Error(std::string(name) + " is not a JSON object", path, "fix or remove the file");
}

// The document-start token: the one the post-processor prepends, else a known name.
std::pair<std::string, int32_t> find_bos(const data::Tokenizer& tok) {
  if (!tok.prefix_ids().empty()) return {tok.id_to_token(tok.prefix_ids().front()), tok.prefix_ids().front()};
  for (const char* name : {"<|begin_of_text|>", "<s>", "<bos>"})
    if (auto id = tok.token_to_id(name)) return {name, *id};
  return {"", -1};
}

}  // namespace

std::string chat_template_jinja(data::ChatTemplate t, bool tokenizer_adds_bos) {
  // Mirrors data/dataset_format.cpp render_messages.
  const std::string bos = tokenizer_adds_bos ? "{{ bos_token }}" : "";
  if (t == data::ChatTemplate::kChatml)
    return bos +
           "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
           "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  // llama3 writes its own <|begin_of_text|> (the trainer then adds no BOS).
  return "{{ '<|begin_of_text|>' }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
         "'<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}"
         "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
}

HfMetadata make_hf_metadata(const data::Tokenizer& tokenizer, const std::string& source_model_dir,
                            std::optional<data::ChatTemplate> chat, int64_t model_max_length) {
  HfMetadata m;
  m.eos_id = data::resolve_eos_id(tokenizer, "");
  m.eos_token = tokenizer.id_to_token(m.eos_id);
  std::tie(m.bos_token, m.bos_id) = find_bos(tokenizer);
  m.model_max_length = model_max_length;
  m.stop_ids = {m.eos_id};
  if (chat) {
    m.chat_template = chat_template_jinja(*chat, !tokenizer.prefix_ids().empty());
    const char* end_of_turn = *chat == data::ChatTemplate::kChatml ? "<|im_end|>" : "<|eot_id|>";
    if (auto id = tokenizer.token_to_id(end_of_turn); id && *id != m.eos_id) m.stop_ids.push_back(*id);
  }
  m.generation_config = read_optional_json(source_model_dir, "generation_config.json");
  m.tokenizer_config = read_optional_json(source_model_dir, "tokenizer_config.json");
  return m;
}

void write_hf_metadata(const HfMetadata& m, const std::string& dir) {
  const std::string config_path = dir + "/config.json";
  json config = json::parse(read_text_file(config_path));
  if (m.bos_id >= 0) config["bos_token_id"] = m.bos_id;
  config["eos_token_id"] = m.eos_id;
  write_file_atomic(config_path, config.dump(2) + "\n");

  json gen = m.generation_config;
  if (m.bos_id >= 0) gen["bos_token_id"] = m.bos_id;
  // A model may stop at several tokens (Llama 3 instruct: end_of_text and eot_id): keep
  // the source's and add each of the run's stop tokens that is missing.
  json stops = json::array();
  if (gen.contains("eos_token_id") && gen["eos_token_id"].is_array()) stops = gen["eos_token_id"];
  else if (gen.contains("eos_token_id") && gen["eos_token_id"].is_number_integer()) stops.push_back(gen["eos_token_id"]);
  for (int32_t id : m.stop_ids)
    if (std::find(stops.begin(), stops.end(), json(id)) == stops.end()) stops.push_back(id);
  gen["eos_token_id"] = stops.size() == 1 ? stops[0] : stops;
  if (!gen.contains("pad_token_id")) gen["pad_token_id"] = m.eos_id;
  write_file_atomic(dir + "/generation_config.json", gen.dump(2) + "\n");

  json tc = m.tokenizer_config;
  if (!tc.contains("tokenizer_class")) tc["tokenizer_class"] = "PreTrainedTokenizerFast";
  if (!m.bos_token.empty()) tc["bos_token"] = m.bos_token;
  tc["eos_token"] = m.eos_token;
  if (!tc.contains("pad_token") || tc["pad_token"].is_null()) tc["pad_token"] = m.eos_token;
  if (m.model_max_length > 0) tc["model_max_length"] = m.model_max_length;
  if (m.chat_template) tc["chat_template"] = *m.chat_template;
  // Decoding with the tokenizer.json's own decoder is what lazytrain does.
  if (!tc.contains("clean_up_tokenization_spaces")) tc["clean_up_tokenization_spaces"] = false;
  write_file_atomic(dir + "/tokenizer_config.json", tc.dump(2) + "\n");
}

}  // namespace lt
