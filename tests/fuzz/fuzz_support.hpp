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

#include "tests/support/utf8.hpp"

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

using testing::valid_utf8; // tests/support/utf8.hpp

// What the server sends must parse as JSON on the client: Boost.JSON's parser also
// refuses invalid UTF-8 inside strings.
inline bool parses_as_json(std::string_view text) {
  boost::json::error_code ec;
  (void)boost::json::parse(text, ec);
  return !ec;
}

} // namespace troupe::fuzz
