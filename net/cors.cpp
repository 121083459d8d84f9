// CORS answers, written as header lines for the serialized responses.
#include "net/cors.hpp"

#include <algorithm>

#include "net/api_error.hpp"
#include "net/http_response.hpp"

namespace troupe::net {

cors_policy::cors_policy(std::vector<std::string> origins) : origins_(std::move(origins)) {
  std::erase_if(origins_, [](const std::string& o) { return o.empty(); });
}

bool cors_policy::allows(std::string_view origin) const {
  if (origin.empty())
    return false;
  return std::any_of(origins_.begin(), origins_.end(), [&](const std::string& o) { return o == "*" || o == origin; });
}

std::string cors_policy::response_headers(std::string_view origin) const {
  if (!allows(origin))
    return {};
  // The origin itself rather than "*": the answer may depend on it, and credentials stay possible.
  return "Access-Control-Allow-Origin: " + std::string(origin) + "\r\nVary: Origin\r\n";
}

std::string cors_policy::preflight_response(std::string_view origin, bool keep_alive) const {
  if (!allows(origin)) {
    api_error e{403, "invalid_request_error", "origin '" + std::string(origin) + "' is not allowed", "",
                "cors_origin_not_allowed"};
    return json_response(403, openai_error_body(e), keep_alive);
  }
  std::string out = "HTTP/1.1 204 No Content\r\n";
  out += response_headers(origin);
  out += "Access-Control-Allow-Methods: GET, POST, OPTIONS\r\n";
  out += "Access-Control-Allow-Headers: Authorization, Content-Type\r\n";
  out += "Access-Control-Max-Age: 600\r\n";
  out += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  out += "Content-Length: 0\r\n\r\n";
  return out;
}

} // namespace troupe::net
