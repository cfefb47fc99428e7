// A compiled PCRE2 pattern for the tokenizer: the split patterns of tokenizer.json
// (GPT-2, Llama 3, Qwen2) use \p{L}, \p{N}, (?i:...) and \s+(?!\S), which need a
// backtracking engine with Unicode properties like the Oniguruma engine HF uses.
// Compiled in UTF + UCP mode (so \s, \w, \d are Unicode-aware), JIT-compiled when the
// library supports it. Invalid UTF-8 in the subject never errors; it just cannot match.
// Thread-safe: matching allocates its own match data.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lt::data {

class Regex {
 public:
  // `where` names the source of the pattern, for the error message on a bad pattern.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(Regex&& other) noexcept;
  Regex& operator=(Regex&& other) noexcept;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // All non-overlapping matches, left to right, as [begin, end) byte offsets. Empty
  // matches are skipped (the tokenizer patterns never need them).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view subject) const;

  // The first match starting at or after `from`; false when there is none.
  bool find(std::string_view subject, size_t from, size_t& begin, size_t& end) const;

  const std::string& pattern() const { return pattern_; }
  bool jit() const { return jit_; }

  // A pattern that matches `literal` exactly.
  static std::string escape(std::string_view literal);

 private:
  void* code_ = nullptr;  // pcre2_code_8*
  std::string pattern_;
  bool jit_ = false;
};

}  // namespace lt::data
