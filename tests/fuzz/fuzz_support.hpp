// What the fuzz targets share: the input as text, a check that stops the run with a
// message (libFuzzer then saves the input as a crash), and a strict UTF-8 test.
#pragma once

#include <boost/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace troupe::fuzz {

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// An invariant the code under test promises: breaking it is a finding, like a crash.
inline void check(bool ok, const char* what, std::string_view detail = {}) {
  if (ok)
    return;
  std::fprintf(stderr, "fuzz check failed: %s\n", what);
  if (!detail.empty())
    std::fprintf(stderr, "  detail: %.*s\n", static_cast<int>(detail.size()), detail.data());
  std::abort();
}

// Strict UTF-8 (no overlongs, surrogates, values past U+10FFFF or cut sequences), as a
// browser's or Python's decoder reads what we send.
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

// What the server sends must parse as JSON on the client: Boost.JSON's parser also
// refuses invalid UTF-8 inside strings.
inline bool parses_as_json(std::string_view text) {
  boost::json::error_code ec;
  (void)boost::json::parse(text, ec);
  return !ec;
}

} // namespace troupe::fuzz
