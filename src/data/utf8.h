// UTF-8 helpers for the tokenizer: code point iteration and encoding.
// Invalid bytes decode as U+FFFD one byte at a time, so iteration always advances and
// never reads past the end (tokenizer input is user text and may be malformed).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace lt::data {

// Decodes the code point at s[pos] and advances pos past it.
char32_t next_code_point(std::string_view s, size_t& pos);

// Appends the UTF-8 encoding of cp to out.
void append_utf8(std::string& out, char32_t cp);

// Byte length of the UTF-8 sequence that starts with byte b (1 for invalid lead bytes).
size_t utf8_sequence_length(unsigned char b);

// The Unicode White_Space property (Rust's char::is_whitespace and regex \s).
bool is_white_space(char32_t c);

// True when `bytes` is valid UTF-8 (Rust's String::from_utf8 accepts it).
bool is_valid_utf8(std::string_view bytes);

// Replaces every invalid UTF-8 sequence with U+FFFD, as Rust's from_utf8_lossy does.
std::string utf8_lossy(std::string_view bytes);

}  // namespace lt::data
