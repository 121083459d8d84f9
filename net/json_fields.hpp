// Typed reads of a JSON request's fields for net/'s parsers: a known field of
// the wrong type is refused with a 400 that names it, null counts as absent.
#pragma once

#include <boost/json.hpp>

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

#include "net/api_error.hpp"

namespace troupe::net {

// Thrown by the readers below and caught by the public parse_* functions,
// which return the error: parsing code then reads straight through.
class request_rejected : public std::exception {
public:
  explicit request_rejected(api_error error) : error_(std::move(error)) {}
  const api_error& error() const noexcept { return error_; }
  const char* what() const noexcept override { return error_.message.c_str(); }

private:
  api_error error_;
};

// Throws a 400 naming `param`.
[[noreturn]] void reject(std::string message, std::string param = {});
inline void require(bool ok, std::string message, std::string param) {
  if (!ok)
    reject(std::move(message), std::move(param));
}

// Parses a request body: malformed JSON, nesting deeper than max_depth
// containers, or anything but an object -> 400.
boost::json::object parse_object(std::string_view body, int max_depth, boost::json::storage_ptr storage);

// The field, or nullptr when it is absent or null (OpenAI treats null as "not given").
const boost::json::value* find_field(const boost::json::object& object, std::string_view name);

// Conversions of one value, `param` naming it in errors. Integers also come as
// whole doubles (1e3); numbers must be finite.
std::int64_t to_int(const boost::json::value& value, std::string_view param);
double to_number(const boost::json::value& value, std::string_view param);
bool to_bool(const boost::json::value& value, std::string_view param);
std::string_view to_string(const boost::json::value& value, std::string_view param);

// The same for a field of `object`, std::nullopt when absent or null.
std::optional<std::int64_t> read_int(const boost::json::object& object, std::string_view name);
std::optional<double> read_number(const boost::json::object& object, std::string_view name);
std::optional<bool> read_bool(const boost::json::object& object, std::string_view name);
std::optional<std::string_view> read_string(const boost::json::object& object, std::string_view name);

// A number as people write it in messages: 2, 0.5, 1e+20.
std::string number_text(double x);

} // namespace troupe::net
