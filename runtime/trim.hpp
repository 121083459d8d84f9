// Trimming text at both ends: chat templates trim messages (Jinja's trim, ASCII whitespace),
// tool calls trim JSON (JSON's four whitespace characters).
#pragma once

#include <string_view>

namespace troupe::runtime {

inline constexpr std::string_view ascii_space = " \t\n\r\f\v";
inline constexpr std::string_view json_space = " \t\n\r";

// s without the leading and trailing characters of `space`.
inline std::string_view trim(std::string_view s, std::string_view space = ascii_space) {
  const auto first = s.find_first_not_of(space);
  if (first == std::string_view::npos)
    return {};
  return s.substr(first, s.find_last_not_of(space) - first + 1);
}

} // namespace troupe::runtime
