#include "data/decoder.h"

#include "core/error.h"
#include "data/byte_level.h"
#include "data/json_fields.h"
#include "data/pre_tokenizer.h"
#include "data/utf8.h"

namespace lt::data {
namespace {

const char* const kSupported =
    "lazytrain supports ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, BPEDecoder "
    "and Sequence";

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The byte of a "<0xNN>" token, or -1. As HF, which parses the two characters with
// Rust's u8::from_str_radix: either case, and a '+' sign before one digit is accepted.
int fallback_byte(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  const int lo = hex_digit(t[4]);
  if (lo < 0) return -1;
  if (t[3] == '+') return lo;
  const int hi = hex_digit(t[3]);
  return hi < 0 ? -1 : hi * 16 + lo;
}

void byte_fallback(std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string run;  // the bytes of consecutive byte tokens
  size_t run_tokens = 0;
  auto flush = [&] {
    if (run_tokens == 0) return;
    if (is_valid_utf8(run)) {
      out.push_back(run);
    } else {
      for (size_t i = 0; i < run_tokens; ++i) out.push_back("\xEF\xBF\xBD");
    }
    run.clear();
    run_tokens = 0;
  };
  for (std::string& t : tokens) {
    const int b = fallback_byte(t);
    if (b >= 0) {
      run += static_cast<char>(b);
      ++run_tokens;
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  tokens.swap(out);
}

// Every occurrence of `from`; an empty `from` matches at each character boundary, as
// Rust's str::replace.
std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  std::string out;
  if (from.empty()) {
    size_t pos = 0;
    out += to;
    while (pos < s.size()) {
      const size_t b = pos;
      next_code_point(s, pos);
      out.append(s, b, pos - b);
      out += to;
    }
    return out;
  }
  size_t prev = 0;
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, prev)) {
    out.append(s, prev, pos - prev);
    out += to;
    prev = pos + from.size();
  }
  out.append(s, prev, std::string::npos);
  return out;
}

// Up to `start` leading and `stop` trailing copies of the character `c`. HF panics where
// the two cuts cross (a token made only of `c`); here the token becomes empty.
std::string strip(const std::string& t, const std::string& c, size_t start, size_t stop) {
  size_t b = 0;
  for (size_t i = 0; i < start && b < t.size() && t.compare(b, c.size(), c) == 0; ++i) b += c.size();
  size_t e = t.size();
  for (size_t i = 0; i < stop && e >= b + c.size() && t.compare(e - c.size(), c.size(), c) == 0; ++i)
    e -= c.size();
  return t.substr(b, e - b);
}

}  // namespace

Decoder Decoder::from_json(const nlohmann::json& j, const std::string& where) {
  Decoder d;
  if (!j.is_null()) d.add(j, where);
  return d;
}

void Decoder::add(const nlohmann::json& j, const std::string& where) {
  const std::string w = where + ": decoder";
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw Error("decoder must be an object with a string \"type\"", w, "check the file was written by HF tokenizers");
  present_ = true;
  const std::string type = j["type"];
  const std::string wt = w + " " + type;
  Step st{};
  if (type == "Sequence") {
    if (!j.contains("decoders") || !j["decoders"].is_array())
      throw Error("Sequence decoder without a \"decoders\" array", w, "");
    for (const auto& s : j["decoders"]) add(s, where);
    return;
  } else if (type == "ByteLevel") {
    st.kind = Kind::kByteLevel;
  } else if (type == "Metaspace") {
    const MetaspaceOptions m = parse_metaspace(j, wt);
    st.kind = Kind::kMetaspace;
    st.text = m.replacement;
    st.skip_first = m.prepend != MetaspaceOptions::Prepend::kNever;
  } else if (type == "ByteFallback") {
    st.kind = Kind::kByteFallback;
  } else if (type == "Fuse") {
    st.kind = Kind::kFuse;
  } else if (type == "Strip") {
    st.kind = Kind::kStrip;
    if (!j.contains("content")) throw Error("Strip decoder without \"content\"", wt, "give the character to strip");
    st.text = json_char(j, "content", "", wt);
    st.start = json_count(j, "start", 0, wt);
    st.stop = json_count(j, "stop", 0, wt);
  } else if (type == "Replace") {
    st.kind = Kind::kReplace;
    if (!j.contains("content")) throw Error("Replace decoder without \"content\"", wt, "");
    st.text = json_string(j, "content", "", wt);
    st.pattern = std::make_shared<Regex>(json_pattern(j, wt), wt);
  } else if (type == "BPEDecoder") {
    st.kind = Kind::kBpeSuffix;
    st.text = json_string(j, "suffix", "</w>", wt);
  } else {
    throw Error("unsupported decoder type \"" + type + "\"", w, kSupported);
  }
  steps_.push_back(std::move(st));
}

std::string Decoder::decode(std::vector<std::string> tokens) const {
  std::string out;
  if (!present_) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
    return utf8_lossy(out);
  }
  for (const Step& st : steps_) {
    switch (st.kind) {
      case Kind::kByteLevel: {
        // A token with characters outside the byte alphabet (an added token such as
        // "<|im_start|>" is fine, but "é" is not) keeps its own UTF-8 bytes.
        std::string bytes;
        for (const std::string& t : tokens) {
          auto b = byte_level_decode(t);
          bytes += b ? *b : t;
        }
        tokens.assign(1, utf8_lossy(bytes));
        break;
      }
      case Kind::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i)
          tokens[i] = replace_all(tokens[i], st.text, i == 0 && st.skip_first ? "" : " ");
        break;
      case Kind::kByteFallback:
        byte_fallback(tokens);
        break;
      case Kind::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case Kind::kStrip:
        for (std::string& t : tokens) t = strip(t, st.text, st.start, st.stop);
        break;
      case Kind::kReplace:
        for (std::string& t : tokens) {
          std::string r;
          size_t prev = 0;
          for (auto [b, e] : st.pattern->find_all(t)) {
            r.append(t, prev, b - prev);
            r += st.text;
            prev = e;
          }
          r.append(t, prev, std::string::npos);
          t = std::move(r);
        }
        break;
      case Kind::kBpeSuffix:
        for (size_t i = 0; i < tokens.size(); ++i)
          tokens[i] = replace_all(tokens[i], st.text, i + 1 == tokens.size() ? "" : " ");
        break;
    }
  }
  for (const std::string& t : tokens) out += t;
  return utf8_lossy(out);
}

}  // namespace lt::data
