// The OpenAI error body and the named constructors of api_error.
#include "net/api_error.hpp"

#include <boost/json.hpp>

#include <utility>

namespace troupe::net {

namespace {
boost::json::value string_or_null(const std::string& s) {
  if (s.empty())
    return nullptr;
  return boost::json::string(s);
}

api_error make(int status, const char* type, std::string message, std::string param, std::string code) {
  return api_error{status, type, std::move(message), std::move(param), std::move(code)};
}
} // namespace

std::string openai_error_body(const api_error& error) {
  boost::json::object inner;
  inner["message"] = error.message;
  inner["type"] = error.type;
  inner["param"] = string_or_null(error.param);
  inner["code"] = string_or_null(error.code);
  boost::json::object body;
  body["error"] = std::move(inner);
  return boost::json::serialize(body);
}

api_error invalid_request(std::string message, std::string param) {
  return make(400, "invalid_request_error", std::move(message), std::move(param), {});
}
api_error not_found(std::string message, std::string param) {
  return make(404, "invalid_request_error", std::move(message), std::move(param), {});
}
api_error request_timeout(std::string message) {
  return make(408, "invalid_request_error", std::move(message), {}, "request_timeout");
}
api_error headers_too_large(std::string message) {
  return make(431, "invalid_request_error", std::move(message), {}, "headers_too_large");
}
api_error payload_too_large(std::string message) {
  return make(413, "invalid_request_error", std::move(message), {}, "payload_too_large");
}
api_error unprocessable(std::string message, std::string param) {
  return make(422, "invalid_request_error", std::move(message), std::move(param), {});
}
api_error too_many_requests(std::string message) {
  return make(429, "rate_limit_error", std::move(message), {}, "rate_limit_exceeded");
}
api_error unauthorized(std::string message) {
  return make(401, "invalid_request_error", std::move(message), {}, "invalid_api_key");
}
api_error unavailable(std::string message) {
  return make(503, "server_error", std::move(message), {}, "unavailable");
}

} // namespace troupe::net
