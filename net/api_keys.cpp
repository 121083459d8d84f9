// Constant-time key checks and the key sources.
#include "net/api_keys.hpp"

#include <fstream>
#include <stdexcept>

namespace troupe::net {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r' || s.front() == '\n'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

// Equal strings, in time that depends only on the lengths (and only the
// candidate's length is the client's to choose).
bool same(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

} // namespace

api_keys::api_keys(std::vector<std::string> keys) {
  for (auto& k : keys)
    if (!trim(k).empty())
      keys_.emplace_back(trim(k));
}

std::optional<std::size_t> api_keys::find(std::string_view key) const {
  std::optional<std::size_t> found;
  for (std::size_t i = 0; i < keys_.size(); ++i)
    if (same(key, keys_[i]))  // every key is compared: no early exit
      found = i;
  return found;
}

std::optional<std::size_t> api_keys::find_authorization(std::string_view header) const {
  header = trim(header);
  constexpr std::string_view scheme = "bearer ";
  if (header.size() <= scheme.size())
    return std::nullopt;
  for (std::size_t i = 0; i < scheme.size(); ++i)
    if (static_cast<char>(std::tolower(static_cast<unsigned char>(header[i]))) != scheme[i])
      return std::nullopt;
  return find(trim(header.substr(scheme.size())));
}

std::vector<std::string> collect_api_keys(std::vector<std::string> listed, const std::string& file,
                                          const char* env_value) {
  std::vector<std::string> out;
  for (auto& k : listed)
    if (!trim(k).empty())
      out.emplace_back(trim(k));
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in)
      throw std::runtime_error("cannot read server.api-keys-file '" + file + "'");
    std::string line;
    while (std::getline(in, line)) {
      auto k = trim(line);
      if (!k.empty() && k.front() != '#')
        out.emplace_back(k);
    }
  }
  if (env_value) {
    std::string_view rest = env_value;
    while (!rest.empty()) {
      auto comma = rest.find(',');
      auto k = trim(rest.substr(0, comma));
      if (!k.empty())
        out.emplace_back(k);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  }
  return out;
}

} // namespace troupe::net
