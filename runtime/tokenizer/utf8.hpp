// UTF-8 helpers for the tokenizer stages: validation with Hugging Face's (Rust's) rules for
// bad input, code point decoding and encoding, and Unicode whitespace.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace troupe::runtime::tokenizer_detail {

inline constexpr std::string_view replacement_char = "\xEF\xBF\xBD"; // U+FFFD

inline std::uint8_t byte_at(std::string_view s, std::size_t i) {
  return static_cast<std::uint8_t>(s[i]);
}

// Length of the character at s[i] of a valid UTF-8 string. Inline: BPE and the regex
// splitter call it once per character.
inline std::size_t char_len(std::string_view s, std::size_t i) {
  const auto b = byte_at(s, i);
  const std::size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  return std::min(n, s.size() - i);
}

enum class utf8_status { valid, invalid, incomplete };

// Checks the sequence starting at s[pos] with the same rules (and the same "maximal
// subpart" lengths for bad input) as Rust's String::from_utf8_lossy, which is what Hugging
// Face's decoders use: `len` is the character's length, the number of bytes that make up
// one U+FFFD, or the bytes seen so far of a sequence that the string ends inside.
utf8_status check_utf8_char(std::string_view s, std::size_t pos, std::size_t& len);

bool is_valid_utf8(std::string_view s);

// Each maximal invalid subsequence becomes one U+FFFD.
std::string to_valid_utf8(std::string_view s);

char32_t decode_char(std::string_view s, std::size_t i, std::size_t len);
void append_char(std::string& out, char32_t c);

// The Unicode White_Space property (what Rust's char::is_whitespace and `\s` test).
bool is_white_space(char32_t c);

// Byte length of the run of whitespace at the start of s.
std::size_t leading_space_len(std::string_view s);

// Where the run of whitespace at the end of s starts.
std::size_t trailing_space_start(std::string_view s);

std::string replace_all(std::string_view s, std::string_view from, std::string_view to);

} // namespace troupe::runtime::tokenizer_detail
