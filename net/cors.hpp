// Cross-origin requests (server.cors-origins): off unless origins are listed.
// An allowed origin gets Access-Control-Allow-Origin on every answer, and its
// preflight (OPTIONS) an answer that allows our methods and headers; any other
// origin's preflight is refused with 403 and its answers carry no CORS header,
// so a browser keeps the page from reading them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace troupe::net {

class cors_policy {
 public:
  cors_policy() = default;
  explicit cors_policy(std::vector<std::string> origins);  // "*" allows any origin

  bool enabled() const { return !origins_.empty(); }
  bool allows(std::string_view origin) const;
  // Header lines (each ending in CRLF) for an answer to a request from `origin`; "" when none apply.
  std::string response_headers(std::string_view origin) const;
  // The whole answer to a preflight from `origin`: 204 with the allowances, or 403.
  std::string preflight_response(std::string_view origin, bool keep_alive) const;

 private:
  std::vector<std::string> origins_;
};

} // namespace troupe::net
