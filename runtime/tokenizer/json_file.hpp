// Typed reads from the tokenizer's JSON files (tokenizer.json, tokenizer_config.json,
// special_tokens_map.json), where every error names the file and the field.
#pragma once

#include "runtime/tokenizer.hpp"

#include <boost/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace troupe::runtime::tokenizer_detail {

// Reads one JSON file; every error is a model_error that starts with the file's path.
class json_file {
 public:
  explicit json_file(std::filesystem::path path);

  [[noreturn]] void fail(const std::string& problem) const;

  boost::json::value parse() const;

  const boost::json::object& object(const boost::json::value& v, std::string_view what) const;
  const boost::json::array& array(const boost::json::value& v, std::string_view what) const;
  std::string string(const boost::json::value& v, std::string_view what) const;
  std::int64_t integer(const boost::json::value& v, std::string_view what) const;
  token_id id(const boost::json::value& v, std::string_view what) const;
  // Absent and null both count as "not given".
  const boost::json::value* field(const boost::json::object& o, std::string_view key) const;
  const boost::json::value& required(const boost::json::object& o, std::string_view key, std::string_view where) const;
  bool flag(const boost::json::object& o, std::string_view key, bool fallback) const;
  std::string type(const boost::json::object& o, std::string_view where) const;

 private:
  std::filesystem::path path_;
  std::string name_;
};

// {"String": "..."} or {"Regex": "..."}, as the Replace and Split steps give a pattern.
struct pattern_spec {
  std::string text;
  bool is_regex = false;
};
pattern_spec read_pattern(const json_file& f, const boost::json::object& o, std::string_view where);

// A string that must hold exactly one UTF-8 character (Metaspace's replacement, Strip's
// content).
std::string single_char(const json_file& f, const boost::json::value& v, std::string_view what);

} // namespace troupe::runtime::tokenizer_detail
