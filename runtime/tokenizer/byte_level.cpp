// GPT-2's bytes-to-unicode map, built once: printable Latin-1 bytes stand for themselves,
// the rest are moved to U+0100 and up, in byte order.
#include "runtime/tokenizer/byte_level.hpp"

#include "runtime/tokenizer/utf8.hpp"

#include <array>
#include <cstdint>

namespace troupe::runtime::tokenizer_detail {
namespace {

struct byte_level_alphabet {
  std::array<std::string, 256> encoded;    // byte -> UTF-8 of its stand-in
  std::array<std::int16_t, 324> decoded{}; // stand-in code point -> byte, -1 if none
};

const byte_level_alphabet& byte_alphabet() {
  static const byte_level_alphabet table = [] {
    byte_level_alphabet t;
    t.decoded.fill(-1);
    char32_t next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t c = printable ? static_cast<char32_t>(b) : next_extra++;
      append_char(t.encoded[b], c);
      t.decoded[c] = static_cast<std::int16_t>(b);
    }
    return t;
  }();
  return table;
}

} // namespace

std::string to_byte_level(std::string_view s) {
  const auto& alphabet = byte_alphabet();
  std::string out;
  out.reserve(s.size() * 2);
  for (const char ch : s)
    out.append(alphabet.encoded[static_cast<std::uint8_t>(ch)]);
  return out;
}

void append_byte_level_token(std::string& out, std::string_view token) {
  const auto& alphabet = byte_alphabet();
  const auto mark = out.size();
  for (std::size_t i = 0; i < token.size();) {
    const auto len = char_len(token, i);
    const auto c = decode_char(token, i, len);
    if (c >= alphabet.decoded.size() || alphabet.decoded[c] < 0) {
      out.resize(mark);
      out.append(token);
      return;
    }
    out.push_back(static_cast<char>(alphabet.decoded[c]));
    i += len;
  }
}

} // namespace troupe::runtime::tokenizer_detail
