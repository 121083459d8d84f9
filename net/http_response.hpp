// Serialized HTTP/1.1 responses: status line, the headers troupe sends, body.
#pragma once

#include <string>
#include <string_view>

namespace troupe::net {

std::string_view status_text(int status);
// retry_after > 0 adds Retry-After (seconds), as 429 and 503 should.
std::string text_response(int status, std::string_view content_type, std::string_view body, bool keep_alive,
                          int retry_after = 0);
inline std::string json_response(int status, std::string_view body, bool keep_alive, int retry_after = 0) {
  return text_response(status, "application/json", body, keep_alive, retry_after);
}

} // namespace troupe::net
