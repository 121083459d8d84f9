// UTF-8 helpers for the tokenizer stages; the decoders' output must match Hugging Face's
// byte for byte, so invalid input is handled exactly as Rust's from_utf8_lossy does.
#include "runtime/tokenizer/utf8.hpp"

namespace troupe::runtime::tokenizer_detail {

utf8_status check_utf8_char(std::string_view s, std::size_t pos, std::size_t& len) {
  const auto b0 = byte_at(s, pos);
  if (b0 < 0x80) {
    len = 1;
    return utf8_status::valid;
  }
  std::size_t need = 0;
  std::uint8_t lo = 0x80, hi = 0xBF; // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0)
      lo = 0xA0; // no overlong forms
    if (b0 == 0xED)
      hi = 0x9F; // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0)
      lo = 0x90;
    if (b0 == 0xF4)
      hi = 0x8F; // nothing above U+10FFFF
  } else {
    len = 1;
    return utf8_status::invalid;
  }
  for (std::size_t i = 1; i < need; ++i) {
    if (pos + i >= s.size()) {
      len = i;
      return utf8_status::incomplete;
    }
    const auto b = byte_at(s, pos + i);
    const std::uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      len = i;
      return utf8_status::invalid;
    }
  }
  len = need;
  return utf8_status::valid;
}

bool is_valid_utf8(std::string_view s) {
  for (std::size_t i = 0, len = 0; i < s.size(); i += len) {
    if (check_utf8_char(s, i, len) != utf8_status::valid)
      return false;
  }
  return true;
}

std::string to_valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (std::size_t i = 0, len = 0; i < s.size(); i += len) {
    if (check_utf8_char(s, i, len) == utf8_status::valid) {
      out.append(s.substr(i, len));
    } else {
      out.append(replacement_char);
    }
  }
  return out;
}

char32_t decode_char(std::string_view s, std::size_t i, std::size_t len) {
  const auto b0 = byte_at(s, i);
  if (len == 1)
    return b0;
  char32_t c = b0 & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (std::size_t k = 1; k < len; ++k)
    c = (c << 6) | (byte_at(s, i + k) & 0x3F);
  return c;
}

void append_char(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::size_t leading_space_len(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto len = char_len(s, i);
    if (!is_white_space(decode_char(s, i, len)))
      break;
    i += len;
  }
  return i;
}

std::size_t trailing_space_start(std::string_view s) {
  std::size_t start = 0; // just past the last non-space character
  for (std::size_t i = 0; i < s.size();) {
    const auto len = char_len(s, i);
    if (!is_white_space(decode_char(s, i, len)))
      start = i + len;
    i += len;
  }
  return start;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  std::size_t pos = 0;
  while (true) {
    const auto hit = s.find(from, pos);
    if (hit == std::string_view::npos)
      break;
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

} // namespace troupe::runtime::tokenizer_detail
