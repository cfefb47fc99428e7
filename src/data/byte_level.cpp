#include "data/byte_level.h"

#include <array>
#include <unordered_map>

#include "data/utf8.h"

namespace lt::data {
namespace {

// Printable bytes keep their own code point; the other 68 bytes take 256, 257, ... in
// byte order. This is the published GPT-2 definition that tokenizer.json files rely on.
struct Tables {
  std::array<char32_t, 256> to_cp{};
  std::array<std::string, 256> to_utf8;
  std::unordered_map<char32_t, unsigned char> from_cp;
  Tables() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_cp[b] = printable ? static_cast<char32_t>(b) : next++;
      append_utf8(to_utf8[b], to_cp[b]);
      from_cp[to_cp[b]] = static_cast<unsigned char>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;  // immutable after construction
  return t;
}

}  // namespace

char32_t byte_to_code_point(unsigned char b) { return tables().to_cp[b]; }

std::string byte_level_encode(std::string_view bytes) {
  const auto& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += t.to_utf8[b];
  return out;
}

std::optional<std::string> byte_level_decode(std::string_view text) {
  const auto& t = tables();
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    char32_t cp = next_code_point(text, pos);
    auto it = t.from_cp.find(cp);
    if (it == t.from_cp.end()) return std::nullopt;
    out += static_cast<char>(it->second);
  }
  return out;
}

}  // namespace lt::data
