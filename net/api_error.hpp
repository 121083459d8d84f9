// A request refused at the wire, as an HTTP status plus OpenAI's error object;
// the HTTP server answers with it, the WebSocket server turns it into an error frame.
#pragma once

#include <string>

namespace troupe::net {

struct api_error {
  int status = 400;
  std::string type;      // OpenAI's error.type, e.g. "invalid_request_error"
  std::string message;   // for people: names the field and what was wrong
  std::string param;     // the offending field ("" when none): error.param
  std::string code;      // a machine-readable reason ("" when none): error.code
};

// {"error":{"message","type","param","code"}}, param and code null when empty,
// the shape OpenAI's clients parse.
std::string openai_error_body(const api_error& error);

// The statuses the server answers with. 4xx that the client must fix share
// OpenAI's "invalid_request_error"; 429 and 503 are worth a retry, and their
// types and codes say so.
api_error invalid_request(std::string message, std::string param = {});          // 400
api_error not_found(std::string message, std::string param = {});                // 404
api_error request_timeout(std::string message);                                  // 408, code "request_timeout"
api_error payload_too_large(std::string message);                                // 413, code "payload_too_large"
api_error headers_too_large(std::string message);                                // 431, code "headers_too_large"
api_error unprocessable(std::string message, std::string param = {});            // 422
api_error too_many_requests(std::string message);                                // 429, code "rate_limit_exceeded"
api_error unavailable(std::string message);                                      // 503, type "server_error"
api_error unauthorized(std::string message);                                     // 401, code "invalid_api_key"

} // namespace troupe::net
