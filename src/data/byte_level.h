// The GPT-2 byte-level alphabet: every byte maps to one printable code point, so any
// byte string becomes a string of visible characters that BPE can merge (space -> "Ġ",
// newline -> "Ċ"). Used by the ByteLevel pre-tokenizer and decoder of tokenizer.json.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace lt::data {

// The code point byte b maps to.
char32_t byte_to_code_point(unsigned char b);

// Maps every byte of `bytes` to its byte-level character (UTF-8 encoded).
std::string byte_level_encode(std::string_view bytes);

// Inverse of byte_level_encode; nullopt when `text` holds a character outside the
// 256-character alphabet (the HF decoder then keeps such a token's text as it is).
std::optional<std::string> byte_level_decode(std::string_view text);

}  // namespace lt::data
