#include "data/dataset_format.h"

#include "core/error.h"

namespace lt::data {

using nlohmann::json;

DatasetFormat parse_dataset_format(const std::string& name) {
  if (name == "auto") return DatasetFormat::kAuto;
  if (name == "text") return DatasetFormat::kText;
  if (name == "prompt_completion") return DatasetFormat::kPromptCompletion;
  if (name == "alpaca") return DatasetFormat::kAlpaca;
  if (name == "gsm8k") return DatasetFormat::kGsm8k;
  if (name == "messages") return DatasetFormat::kMessages;
  throw Error("unknown dataset format \"" + name + "\"", "dataset format",
              "use auto, text, prompt_completion, alpaca, gsm8k or messages");
}

std::string dataset_format_name(DatasetFormat f) {
  switch (f) {
    case DatasetFormat::kAuto: return "auto";
    case DatasetFormat::kText: return "text";
    case DatasetFormat::kPromptCompletion: return "prompt_completion";
    case DatasetFormat::kAlpaca: return "alpaca";
    case DatasetFormat::kGsm8k: return "gsm8k";
    case DatasetFormat::kMessages: return "messages";
  }
  return "?";
}

ChatTemplate parse_chat_template(const std::string& name) {
  if (name == "chatml") return ChatTemplate::kChatml;
  if (name == "llama3") return ChatTemplate::kLlama3;
  throw Error("unknown chat template \"" + name + "\"", "chat template", "use chatml or llama3");
}

std::string chat_template_name(ChatTemplate t) { return t == ChatTemplate::kChatml ? "chatml" : "llama3"; }

DatasetFormat detect_format(const json& r) {
  if (!r.is_object()) throw Error("the line is not a JSON object");
  if (r.contains("messages")) return DatasetFormat::kMessages;
  if (r.contains("instruction") && r.contains("output")) return DatasetFormat::kAlpaca;
  if (r.contains("question") && r.contains("answer")) return DatasetFormat::kGsm8k;
  if (r.contains("prompt") && r.contains("completion")) return DatasetFormat::kPromptCompletion;
  if (r.contains("text")) return DatasetFormat::kText;
  throw Error("no known format fits the keys of this record",
              "auto-detected dataset format",
              "use one of: text; prompt+completion; instruction+input+output; question+answer; messages");
}

namespace {

std::string get_string(const json& r, const char* key, bool required = true) {
  if (!r.contains(key) || r[key].is_null()) {
    if (required) throw Error(std::string("missing key \"") + key + "\"");
    return "";
  }
  if (!r[key].is_string()) throw Error(std::string("key \"") + key + "\" is not a string");
  return r[key].get<std::string>();
}

RenderedRecord render_messages(const json& r, ChatTemplate chat) {
  if (!r.contains("messages")) throw Error("missing key \"messages\"");
  const json& msgs = r["messages"];
  if (!msgs.is_array() || msgs.empty()) throw Error("\"messages\" is not a non-empty array");
  RenderedRecord out;
  out.has_eos = true;
  bool any_assistant = false;
  if (chat == ChatTemplate::kLlama3) {
    out.segments.push_back({"<|begin_of_text|>", false});
    out.has_bos = true;
  }
  for (size_t i = 0; i < msgs.size(); ++i) {
    const json& m = msgs[i];
    if (!m.is_object()) throw Error("message " + std::to_string(i) + " is not an object");
    std::string role = get_string(m, "role"), content = get_string(m, "content");
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      throw Error("message " + std::to_string(i) + " has unknown role \"" + role + "\"");
    const bool assistant = role == "assistant";
    any_assistant |= assistant;
    // The header is never trained; the assistant's content and its end-of-turn token are,
    // so the model learns to stop.
    if (chat == ChatTemplate::kChatml) {
      out.segments.push_back({"<|im_start|>" + role + "\n", false});
      out.segments.push_back({content + "<|im_end|>", assistant});
      out.segments.push_back({"\n", false});
    } else {
      out.segments.push_back({"<|start_header_id|>" + role + "<|end_header_id|>\n\n", false});
      out.segments.push_back({content + "<|eot_id|>", assistant});
    }
  }
  if (!any_assistant) throw Error("\"messages\" has no assistant turn to train on");
  return out;
}

}  // namespace

std::string gsm8k_prompt(const std::string& question) { return "Question: " + question + "\nAnswer: "; }

std::string alpaca_prompt(const std::string& instruction, const std::string& input) {
  if (input.empty())
    return "Below is an instruction that describes a task. Write a response that appropriately "
           "completes the request.\n\n### Instruction:\n" +
           instruction + "\n\n### Response:\n";
  return "Below is an instruction that describes a task, paired with an input that provides further "
         "context. Write a response that appropriately completes the request.\n\n### Instruction:\n" +
         instruction + "\n\n### Input:\n" + input + "\n\n### Response:\n";
}

std::vector<std::string> chat_template_tokens(ChatTemplate t) {
  if (t == ChatTemplate::kChatml) return {"<|im_start|>", "<|im_end|>"};
  return {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
}

RenderedRecord render_record(const json& r, DatasetFormat format, ChatTemplate chat) {
  if (!r.is_object()) throw Error("the line is not a JSON object");
  if (format == DatasetFormat::kAuto) format = detect_format(r);
  RenderedRecord out;
  switch (format) {
    case DatasetFormat::kText:
      out.segments.push_back({get_string(r, "text"), true});
      break;
    case DatasetFormat::kPromptCompletion:
      out.segments.push_back({get_string(r, "prompt"), false});
      out.segments.push_back({get_string(r, "completion"), true});
      break;
    case DatasetFormat::kAlpaca:
      out.segments.push_back({alpaca_prompt(get_string(r, "instruction"), get_string(r, "input", false)), false});
      out.segments.push_back({get_string(r, "output"), true});
      break;
    case DatasetFormat::kGsm8k:
      out.segments.push_back({gsm8k_prompt(get_string(r, "question")), false});
      out.segments.push_back({get_string(r, "answer"), true});
      break;
    case DatasetFormat::kMessages:
      return render_messages(r, chat);
    case DatasetFormat::kAuto:
      break;
  }
  return out;
}

}  // namespace lt::data
