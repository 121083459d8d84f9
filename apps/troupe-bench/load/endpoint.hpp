// The server a benchmark talks to, from --url: ws://HOST:PORT/PATH for the WebSocket
// stream, http://HOST:PORT[/PATH] for the OpenAI completions endpoint with SSE.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace troupe::bench {

enum class transport_kind { ws, sse };

// The server could not be reached at all (as opposed to a request that failed).
class unreachable_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct endpoint {
  transport_kind kind = transport_kind::ws;
  std::string host, port, path; // path: /v1/stream or /v1/completions when the URL names none
  std::string host_header() const { return host + ":" + port; }
};

// The scheme picks the transport unless `wanted` names one: then a URL of the other
// scheme may give only host and port (http://HOST:PORT with ws takes /v1/stream).
// Throws std::invalid_argument for another scheme, a malformed URL or a path that
// belongs to the other transport. The port defaults to 80.
endpoint parse_url(std::string_view url, std::optional<transport_kind> wanted = std::nullopt);

std::string_view to_string(transport_kind kind);

} // namespace troupe::bench
