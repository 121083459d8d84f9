// API keys of the front door (server.api-keys): which requests may pass. A key
// comes as "Authorization: Bearer <key>" (HTTP, the WebSocket upgrade) or in a
// browser's first {"type":"auth","key"} frame. Keys are compared in constant
// time, so the time of a refusal says nothing about how much of a key matched.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::net {

class api_keys {
 public:
  api_keys() = default;
  explicit api_keys(std::vector<std::string> keys);

  // No keys configured: every request passes.
  bool required() const { return !keys_.empty(); }
  bool accepts(std::string_view key) const { return find(key).has_value(); }
  // The value of an Authorization header: "Bearer <key>" (scheme case-insensitive).
  bool accepts_authorization(std::string_view header) const { return find_authorization(header).has_value(); }
  // Which key it is (its index in the list: what per-key limits count by), or nullopt.
  std::optional<std::size_t> find(std::string_view key) const;
  std::optional<std::size_t> find_authorization(std::string_view header) const;

 private:
  std::vector<std::string> keys_;
};

// Keys from every source troupe-serve reads: the INI/CLI list, a file (one key
// per line; blank lines and lines starting with '#' skipped) and an environment
// variable's value (comma-separated). Whitespace around keys is dropped.
// Throws std::runtime_error naming the file when it cannot be read.
std::vector<std::string> collect_api_keys(std::vector<std::string> listed, const std::string& file,
                                          const char* env_value);

} // namespace troupe::net
