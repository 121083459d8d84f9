// Typed field reads over Boost.JSON, with OpenAI-style 400s that name the field.
#include "net/json_fields.hpp"

#include <charconv>
#include <cmath>
#include <limits>

namespace troupe::net {

namespace {
const char* kind_text(const boost::json::value& value) {
  switch (value.kind()) {
  case boost::json::kind::null: return "null";
  case boost::json::kind::bool_: return "a boolean";
  case boost::json::kind::int64:
  case boost::json::kind::uint64: return "an integer";
  case boost::json::kind::double_: return "a number";
  case boost::json::kind::string: return "a string";
  case boost::json::kind::array: return "an array";
  case boost::json::kind::object: return "an object";
  }
  return "a value";
}

[[noreturn]] void reject_type(const boost::json::value& value, std::string_view param, const char* expected) {
  reject("'" + std::string(param) + "' must be " + expected + ", got " + kind_text(value), std::string(param));
}
} // namespace

void reject(std::string message, std::string param) {
  throw request_rejected(invalid_request(std::move(message), std::move(param)));
}

boost::json::object parse_object(std::string_view body, int max_depth, boost::json::storage_ptr storage) {
  boost::json::parse_options options;
  options.max_depth = static_cast<std::size_t>(max_depth < 0 ? 0 : max_depth);
  boost::json::error_code ec;
  auto value = boost::json::parse(body, ec, std::move(storage), options);
  if (ec == boost::json::error::too_deep)
    reject("the request body is nested deeper than " + std::to_string(max_depth) + " levels");
  if (ec)
    reject("the request body is not valid JSON: " + ec.message());
  if (!value.is_object())
    reject(std::string("the request body must be a JSON object, got ") + kind_text(value));
  return std::move(value.get_object());
}

const boost::json::value* find_field(const boost::json::object& object, std::string_view name) {
  auto* value = object.if_contains(name);
  return value && !value->is_null() ? value : nullptr;
}

std::int64_t to_int(const boost::json::value& value, std::string_view param) {
  if (value.is_int64())
    return value.get_int64();
  if (value.is_uint64()) {
    require(value.get_uint64() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
            "'" + std::string(param) + "' is out of range", std::string(param));
    return static_cast<std::int64_t>(value.get_uint64());
  }
  if (value.is_double()) {
    double x = value.get_double();
    // 2^63 is the first double past int64's range.
    if (std::isfinite(x) && x == std::trunc(x) && x >= -9223372036854775808.0 && x < 9223372036854775808.0)
      return static_cast<std::int64_t>(x);
    if (std::isfinite(x) && x == std::trunc(x))
      reject("'" + std::string(param) + "' is out of range", std::string(param));
  }
  reject_type(value, param, "an integer");
}

double to_number(const boost::json::value& value, std::string_view param) {
  if (!value.is_number())
    reject_type(value, param, "a number");
  double x = value.to_number<double>();
  require(std::isfinite(x), "'" + std::string(param) + "' must be a finite number", std::string(param));
  return x;
}

bool to_bool(const boost::json::value& value, std::string_view param) {
  if (!value.is_bool())
    reject_type(value, param, "a boolean");
  return value.get_bool();
}

std::string_view to_string(const boost::json::value& value, std::string_view param) {
  if (!value.is_string())
    reject_type(value, param, "a string");
  return value.get_string();
}

std::optional<std::int64_t> read_int(const boost::json::object& object, std::string_view name) {
  auto* value = find_field(object, name);
  return value ? std::optional(to_int(*value, name)) : std::nullopt;
}
std::optional<double> read_number(const boost::json::object& object, std::string_view name) {
  auto* value = find_field(object, name);
  return value ? std::optional(to_number(*value, name)) : std::nullopt;
}
std::optional<bool> read_bool(const boost::json::object& object, std::string_view name) {
  auto* value = find_field(object, name);
  return value ? std::optional(to_bool(*value, name)) : std::nullopt;
}
std::optional<std::string_view> read_string(const boost::json::object& object, std::string_view name) {
  auto* value = find_field(object, name);
  return value ? std::optional(to_string(*value, name)) : std::nullopt;
}

std::string number_text(double x) {
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, x);
  return ec == std::errc() ? std::string(buffer, end) : std::to_string(x);
}

} // namespace troupe::net
