// Typed reads from the tokenizer's JSON files; a bad file must fail with a message that
// says which file and which field, never with a bare Boost.JSON exception.
#include "runtime/tokenizer/json_file.hpp"

#include "runtime/errors.hpp"
#include "runtime/tokenizer/utf8.hpp"

#include <cstdint>
#include <fstream>
#include <sstream>
#include <utility>

namespace troupe::runtime::tokenizer_detail {

namespace json = boost::json;

json_file::json_file(std::filesystem::path path) : path_(std::move(path)), name_(path_.string()) {}

void json_file::fail(const std::string& problem) const {
  throw model_error(name_ + ": " + problem);
}

json::value json_file::parse() const {
  std::ifstream in(path_, std::ios::binary);
  if (!in)
    fail("cannot be opened");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad())
    fail("cannot be read");
  boost::system::error_code ec;
  json::value v = json::parse(buffer.str(), ec);
  if (ec)
    fail("invalid JSON (" + ec.message() + ")");
  return v;
}

const json::object& json_file::object(const json::value& v, std::string_view what) const {
  if (!v.is_object())
    fail(std::string(what) + " must be a JSON object");
  return v.get_object();
}

const json::array& json_file::array(const json::value& v, std::string_view what) const {
  if (!v.is_array())
    fail(std::string(what) + " must be a JSON array");
  return v.get_array();
}

std::string json_file::string(const json::value& v, std::string_view what) const {
  if (!v.is_string())
    fail(std::string(what) + " must be a string");
  return std::string(v.get_string());
}

std::int64_t json_file::integer(const json::value& v, std::string_view what) const {
  if (v.is_int64())
    return v.get_int64();
  if (v.is_uint64() && v.get_uint64() <= INT64_MAX)
    return static_cast<std::int64_t>(v.get_uint64());
  fail(std::string(what) + " must be an integer");
}

token_id json_file::id(const json::value& v, std::string_view what) const {
  const auto n = integer(v, what);
  if (n < 0 || n > INT32_MAX)
    fail(std::string(what) + " is out of range (" + std::to_string(n) + ")");
  return static_cast<token_id>(n);
}

const json::value* json_file::field(const json::object& o, std::string_view key) const {
  const auto* v = o.if_contains(key);
  return v == nullptr || v->is_null() ? nullptr : v;
}

const json::value& json_file::required(const json::object& o, std::string_view key, std::string_view where) const {
  const auto* v = field(o, key);
  if (v == nullptr)
    fail("missing '" + std::string(key) + "' in " + std::string(where));
  return *v;
}

bool json_file::flag(const json::object& o, std::string_view key, bool fallback) const {
  const auto* v = field(o, key);
  if (v == nullptr)
    return fallback;
  if (!v->is_bool())
    fail("'" + std::string(key) + "' must be true or false");
  return v->get_bool();
}

std::string json_file::type(const json::object& o, std::string_view where) const {
  return string(required(o, "type", where), std::string(where) + ".type");
}

pattern_spec read_pattern(const json_file& f, const json::object& o, std::string_view where) {
  const auto& p = f.object(f.required(o, "pattern", where), std::string(where) + ".pattern");
  if (const auto* s = f.field(p, "String"))
    return {f.string(*s, "pattern.String"), false};
  if (const auto* r = f.field(p, "Regex"))
    return {f.string(*r, "pattern.Regex"), true};
  f.fail(std::string(where) + ".pattern must hold \"String\" or \"Regex\"");
}

std::string single_char(const json_file& f, const json::value& v, std::string_view what) {
  auto s = f.string(v, what);
  if (s.empty() || !is_valid_utf8(s) || char_len(s, 0) != s.size()) {
    f.fail(std::string(what) + " must be a single character");
  }
  return s;
}

} // namespace troupe::runtime::tokenizer_detail
