#include "data/exact_match.h"

#include "core/error.h"

namespace lt::data {

std::optional<std::string> extract_final_answer(std::string_view text) {
  size_t p = text.find("####");
  if (p == std::string_view::npos) return std::nullopt;
  p += 4;
  while (p < text.size() && (text[p] == ' ' || text[p] == '\t')) ++p;
  std::string out;
  if (p < text.size() && (text[p] == '-' || text[p] == '+')) {
    if (text[p] == '-') out += '-';
    ++p;
  }
  bool digits = false, dot = false;
  for (; p < text.size(); ++p) {
    char c = text[p];
    if (c >= '0' && c <= '9') {
      out += c;
      digits = true;
    } else if (c == ',' && digits && !dot && p + 1 < text.size() && text[p + 1] >= '0' && text[p + 1] <= '9') {
      continue;  // thousands separator
    } else if (c == '.' && digits && !dot && p + 1 < text.size() && text[p + 1] >= '0' && text[p + 1] <= '9') {
      out += c;
      dot = true;
    } else {
      break;
    }
  }
  if (!digits) return std::nullopt;
  if (dot) {  // 12.50 and 12.5 agree; 12.0 is 12
    while (out.back() == '0') out.pop_back();
    if (out.back() == '.') out.pop_back();
  }
  // Leading zeros: "007" is 7.
  size_t neg = out[0] == '-' ? 1 : 0;
  size_t z = neg;
  while (z + 1 < out.size() && out[z] == '0' && out[z + 1] != '.') ++z;
  out.erase(neg, z - neg);
  if (out == "-0") out = "0";
  return out;
}

bool exact_match(std::string_view generated, std::string_view reference) {
  auto want = extract_final_answer(reference);
  if (!want)
    throw Error("reference answer has no \"#### N\" final answer", std::string(reference.substr(0, 80)),
                "GSM8K-format answers end with \"#### <number>\"");
  auto got = extract_final_answer(generated);
  return got && *got == *want;
}

double exact_match_rate(const std::vector<std::string>& generated, const std::vector<std::string>& references) {
  if (generated.size() != references.size())
    throw Error("generated and reference counts differ (" + std::to_string(generated.size()) + " vs " +
                    std::to_string(references.size()) + ")",
                "exact_match_rate", "");
  if (generated.empty()) return 0.0;
  size_t hits = 0;
  for (size_t i = 0; i < generated.size(); ++i) hits += exact_match(generated[i], references[i]);
  return static_cast<double>(hits) / static_cast<double>(generated.size());
}

}  // namespace lt::data
