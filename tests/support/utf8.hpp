// Strict UTF-8 (no overlongs, surrogates, values past U+10FFFF or cut sequences), as a
// browser's or Python's decoder reads what we send. Shared by the unit tests and the
// fuzz targets that check the tokenizer's and detokenizer's output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace troupe::testing {

inline bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<std::uint8_t>(s[i]);
    std::size_t n = 0;
    std::uint8_t lo = 0x80, hi = 0xBF;
    if (b < 0x80)
      n = 1;
    else if (b >= 0xC2 && b <= 0xDF)
      n = 2;
    else if (b >= 0xE0 && b <= 0xEF)
      n = 3, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
    else if (b >= 0xF0 && b <= 0xF4)
      n = 4, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
    else
      return false;
    if (i + n > s.size())
      return false;
    for (std::size_t k = 1; k < n; ++k) {
      const auto c = static_cast<std::uint8_t>(s[i + k]);
      if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF))
        return false;
    }
    i += n;
  }
  return true;
}

} // namespace troupe::testing
