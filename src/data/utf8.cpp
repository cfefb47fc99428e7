#include "data/utf8.h"

namespace lt::data {

size_t utf8_sequence_length(unsigned char b) {
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) return 2;
  if ((b & 0xF0) == 0xE0) return 3;
  if ((b & 0xF8) == 0xF0) return 4;
  return 1;
}

// Returns the length of a valid sequence at s[pos], or 0 when it is invalid
// (bad continuation, overlong form, surrogate, or beyond U+10FFFF).
static size_t valid_sequence_length(std::string_view s, size_t pos, char32_t& cp) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  size_t n = utf8_sequence_length(b0);
  if (n == 1 || pos + n > s.size()) return 0;
  char32_t v = b0 & (0x7F >> n);
  for (size_t i = 1; i < n; ++i) {
    const auto b = static_cast<unsigned char>(s[pos + i]);
    if ((b & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b & 0x3F);
  }
  static constexpr char32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < kMin[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  cp = v;
  return n;
}

char32_t next_code_point(std::string_view s, size_t& pos) {
  char32_t cp = 0;
  size_t n = valid_sequence_length(s, pos, cp);
  if (n == 0) {
    pos += 1;
    return 0xFFFD;
  }
  pos += n;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool is_valid_utf8(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    char32_t cp = 0;
    const size_t n = valid_sequence_length(bytes, pos, cp);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    char32_t cp = 0;
    size_t n = valid_sequence_length(bytes, pos, cp);
    if (n == 0) {
      // One U+FFFD per maximal invalid prefix, as Rust's from_utf8_lossy: skip the lead
      // byte and any continuation bytes that belonged to the broken sequence.
      const auto b0 = static_cast<unsigned char>(bytes[pos]);
      size_t want = utf8_sequence_length(b0);
      size_t k = 1;
      while (want > 1 && k < want && pos + k < bytes.size() &&
             (static_cast<unsigned char>(bytes[pos + k]) & 0xC0) == 0x80) {
        // Stop where the prefix itself is already impossible (overlong/surrogate/range),
        // as the WHATWG/Rust "maximal subpart" rule does.
        const auto b1 = static_cast<unsigned char>(bytes[pos + 1]);
        if (k == 1 && ((b0 == 0xE0 && b1 < 0xA0) || (b0 == 0xED && b1 > 0x9F) ||
                       (b0 == 0xF0 && b1 < 0x90) || (b0 == 0xF4 && b1 > 0x8F) ||
                       b0 == 0xC0 || b0 == 0xC1 || b0 > 0xF4))
          break;
        ++k;
      }
      append_utf8(out, 0xFFFD);
      pos += k;
      continue;
    }
    out.append(bytes.substr(pos, n));
    pos += n;
  }
  return out;
}

}  // namespace lt::data
