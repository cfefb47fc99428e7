#include "data/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "core/error.h"

namespace lt::data {
namespace {

pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& where) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()),
                                   pattern.size(), options, &err, &err_offset, nullptr);
  if (!code)
    throw Error("regex pattern does not compile: " + pcre2_message(err) + " at offset " +
                    std::to_string(err_offset) + " of /" + pattern + "/",
                where, "fix the pattern (PCRE2 syntax with Unicode properties)");
  code_ = code;
  // JIT is an optimisation only: a library built without it still matches correctly.
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() {
  if (code_) pcre2_code_free(as_code(code_));
}

Regex::Regex(Regex&& other) noexcept
    : code_(other.code_), pattern_(std::move(other.pattern_)), jit_(other.jit_) {
  other.code_ = nullptr;
}

Regex& Regex::operator=(Regex&& other) noexcept {
  if (this != &other) {
    if (code_) pcre2_code_free(as_code(code_));
    code_ = other.code_;
    pattern_ = std::move(other.pattern_);
    jit_ = other.jit_;
    other.code_ = nullptr;
  }
  return *this;
}

namespace {

// One match attempt with caller-owned match data (reused across a find_all loop).
bool match_at(pcre2_code* code, pcre2_match_data* md, std::string_view subject, size_t from, size_t& begin,
              size_t& end, const std::string& pattern) {
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  int rc = pcre2_match(code, s, subject.size(), from, 0, md, nullptr);
  // The JIT runs on a small machine stack; a very long whitespace run can exhaust it.
  // The interpreter keeps its backtracking state on the heap, so retry there.
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = pcre2_match(code, s, subject.size(), from, PCRE2_NO_JIT, md, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0)
    throw Error("regex match failed: " + pcre2_message(rc), "pattern /" + pattern + "/",
                "report this input to the lazytrain developers");
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  begin = ov[0];
  end = ov[1];
  return true;
}

}  // namespace

bool Regex::find(std::string_view subject, size_t from, size_t& begin, size_t& end) const {
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create_from_pattern(as_code(code_), nullptr));
  return match_at(as_code(code_), md.get(), subject, from, begin, end, pattern_);
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view subject) const {
  std::vector<std::pair<size_t, size_t>> out;
  size_t pos = 0;
  size_t b = 0, e = 0;
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create_from_pattern(as_code(code_), nullptr));
  while (pos <= subject.size() && match_at(as_code(code_), md.get(), subject, pos, b, e, pattern_)) {
    if (e > b) {
      out.emplace_back(b, e);
      pos = e;
    } else {
      // Empty match: step over one whole UTF-8 character so the next search is valid.
      pos = b + 1;
      while (pos < subject.size() && (static_cast<unsigned char>(subject[pos]) & 0xC0) == 0x80)
        ++pos;
    }
  }
  return out;
}

std::string Regex::escape(std::string_view literal) {
  // \Q...\E quotes everything but a literal "\E", which is split out.
  std::string out = "\\Q";
  for (size_t i = 0; i < literal.size(); ++i) {
    if (literal[i] == '\\' && i + 1 < literal.size() && literal[i + 1] == 'E') {
      out += "\\E\\\\\\Q";
      continue;
    }
    out += literal[i];
  }
  out += "\\E";
  return out;
}

}  // namespace lt::data
