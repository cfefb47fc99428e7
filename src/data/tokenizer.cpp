#include "data/tokenizer.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/bpe_model.h"
#include "data/decoder.h"
#include "data/normalizer.h"
#include "data/pre_tokenizer.h"

namespace lt::data {

using nlohmann::json;

struct Tokenizer::Impl {
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  BpeModel model;
  AddedVocabulary added;
  Decoder decoder;
  std::vector<int32_t> prefix, suffix;
};

namespace {

// Looks up a special token of a post-processor: a [content, id] pair or a name whose ids
// are listed in TemplateProcessing's "special_tokens".
void parse_post_processor(const json& j, Tokenizer::Impl& t, const std::string& where) {
  if (j.is_null()) return;
  const std::string w = where + ": post_processor";
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw Error("post_processor must be an object with a string \"type\"", w, "");
  const std::string type = j["type"];
  if (type == "ByteLevel") return;  // offsets only; ids are unchanged
  if (type == "Sequence") {
    if (!j.contains("processors") || !j["processors"].is_array())
      throw Error("Sequence post_processor without a \"processors\" array", w, "");
    for (const auto& p : j["processors"]) parse_post_processor(p, t, where);
    return;
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    auto id_of = [&](const char* key) {
      if (!j.contains(key) || !j[key].is_array() || j[key].size() != 2 || !j[key][1].is_number_integer())
        throw Error(std::string(type) + " needs \"" + key + "\": [token, id]", w, "");
      return j[key][1].get<int32_t>();
    };
    t.prefix.push_back(id_of("cls"));
    t.suffix.push_back(id_of("sep"));
    return;
  }
  if (type == "TemplateProcessing") {
    if (!j.contains("single") || !j["single"].is_array())
      throw Error("TemplateProcessing without a \"single\" template", w, "");
    const json specials = j.value("special_tokens", json::object());
    bool seen_sequence = false;
    for (const auto& piece : j["single"]) {
      if (piece.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      if (!piece.contains("SpecialToken") || !piece["SpecialToken"].contains("id"))
        throw Error("template piece is neither Sequence nor SpecialToken", w, "");
      const std::string name = piece["SpecialToken"]["id"];
      if (!specials.contains(name) || !specials[name].contains("ids") || !specials[name]["ids"].is_array())
        throw Error("template names special token \"" + name + "\" without ids in \"special_tokens\"", w,
                    "");
      for (const auto& id : specials[name]["ids"])
        (seen_sequence ? t.suffix : t.prefix).push_back(id.get<int32_t>());
    }
    return;
  }
  throw Error("unsupported post_processor type \"" + type + "\"", w,
              "lazytrain supports TemplateProcessing, ByteLevel, Bert/RobertaProcessing, Sequence");
}

void parse_added_tokens(const json& j, Tokenizer::Impl& t, const std::string& where) {
  if (j.is_null()) return;
  const std::string w = where + ": added_tokens";
  if (!j.is_array()) throw Error("\"added_tokens\" must be an array", w, "");
  // As HF (AddedVocabulary::add_tokens), the ids written in the file are not what counts:
  // a token whose content is known already (model vocabulary, or an earlier added token)
  // takes that id, and the others are numbered in file order from the number of entries
  // in the model vocabulary. Files HF wrote agree with their ids; a hand-edited one may not.
  int32_t next_id = t.model.vocab_count();
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& e = j[i];
    if (!e.is_object() || !e.contains("content") || !e["content"].is_string() || !e.contains("id") ||
        !e["id"].is_number_integer())
      throw Error("added token " + std::to_string(i) + " needs a string \"content\" and an integer \"id\"",
                  w, "");
    AddedToken a;
    a.content = e["content"];
    a.special = e.value("special", false);
    // HF's default: special tokens match the raw text, others the normalized text.
    a.normalized = e.value("normalized", !a.special);
    a.single_word = e.value("single_word", false);
    a.lstrip = e.value("lstrip", false);
    a.rstrip = e.value("rstrip", false);
    if (a.content.empty()) continue;  // HF ignores these, and gives them no id
    if (const AddedToken* known = t.added.find_content(a.content))
      a.id = known->id;
    else if (auto mid = t.model.token_to_id(a.content))
      a.id = *mid;
    else
      a.id = next_id++;
    t.added.add(a);
  }
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error("cannot open tokenizer file", path,
                "check the path; a Hugging Face model directory has tokenizer.json");
  std::ostringstream ss;
  ss << in.rdbuf();
  return from_json_text(ss.str(), path);
}

Tokenizer Tokenizer::from_json_text(const std::string& json_text, const std::string& where) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(std::string("tokenizer.json is not valid JSON: ") + e.what(), where,
                "re-download or re-save the tokenizer");
  }
  if (!j.is_object()) throw Error("tokenizer.json is not a JSON object", where, "");
  if (!j.contains("model") || !j["model"].is_object())
    throw Error("tokenizer.json has no \"model\" object", where,
                "this does not look like a Hugging Face tokenizers file");
  const json& model = j["model"];
  // Old files omit the model type; a vocab plus merges is BPE.
  std::string type = model.contains("type") && model["type"].is_string()
                         ? model["type"].get<std::string>()
                         : (model.contains("merges") ? "BPE" : "");
  if (type != "BPE")
    throw Error("unsupported tokenizer model type \"" + type + "\"", where + ": model",
                "lazytrain supports BPE tokenizers (byte-level as GPT-2, Llama 3, Qwen2; "
                "SentencePiece-style as Llama 2, Mistral, Gemma)");

  auto impl = std::make_unique<Impl>();
  try {
    impl->model = BpeModel::from_json(model, where);
    impl->normalizer = Normalizer::from_json(j.value("normalizer", json()), where);
    impl->pre_tokenizer = PreTokenizer::from_json(j.value("pre_tokenizer", json()), where);
    impl->decoder = Decoder::from_json(j.value("decoder", json()), where);
    parse_added_tokens(j.value("added_tokens", json()), *impl, where);
    impl->added.build(impl->normalizer);
    parse_post_processor(j.value("post_processor", json()), *impl, where);
  } catch (const json::exception& e) {
    // A field of the wrong JSON type somewhere the checks above do not look.
    throw Error(std::string("tokenizer.json has a field of the wrong type: ") + e.what(), where,
                "re-save the tokenizer with HF tokenizers");
  }
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Impl& t = *impl_;
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = t.prefix;
  std::vector<TextSplit> raw, normalized;
  std::vector<std::string> words;
  t.added.split(std::string(text), /*normalized_set=*/false, raw);
  // Splits never come out empty, so the first of each list is the one that starts its text
  // (which Metaspace's prepend_scheme "first" needs to know).
  for (size_t ri = 0; ri < raw.size(); ++ri) {
    const TextSplit& r = raw[ri];
    if (r.id >= 0) {
      ids.push_back(r.id);
      continue;
    }
    normalized.clear();
    t.added.split(t.normalizer.normalize(r.text), /*normalized_set=*/true, normalized);
    for (size_t ni = 0; ni < normalized.size(); ++ni) {
      const TextSplit& n = normalized[ni];
      if (n.id >= 0) {
        ids.push_back(n.id);
        continue;
      }
      words.clear();
      t.pre_tokenizer.split(n.text, words, /*at_start=*/ri == 0 && ni == 0);
      for (const std::string& w : words) t.model.encode_word(w, ids);
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), t.suffix.begin(), t.suffix.end());
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const Impl& t = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const AddedToken* a = t.added.find_id(id)) {
      if (skip_special_tokens && a->special) continue;
      tokens.push_back(a->decode_text);
    } else {
      const std::string& tok = t.model.id_to_token(id);
      if (tok.empty()) continue;  // unknown ids are skipped, as HF does
      tokens.push_back(tok);
    }
  }
  return t.decoder.decode(std::move(tokens));
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const AddedToken* a = impl_->added.find_content(std::string(token))) return a->id;
  return impl_->model.token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* a = impl_->added.find_id(id)) return a->decode_text;
  return impl_->model.id_to_token(id);
}

bool Tokenizer::is_special(int32_t id) const {
  const AddedToken* a = impl_->added.find_id(id);
  return a && a->special;
}

int32_t Tokenizer::vocab_size() const {
  int32_t n = impl_->model.id_limit();
  for (const AddedToken& a : impl_->added.tokens()) n = std::max(n, a.id + 1);
  return n;
}

const std::vector<int32_t>& Tokenizer::prefix_ids() const { return impl_->prefix; }
const std::vector<int32_t>& Tokenizer::suffix_ids() const { return impl_->suffix; }
const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added.tokens(); }

}  // namespace lt::data
