// The server's HTTP routes: which handler a request goes to (by method and path),
// and which paths need an API key. The session asks, then answers.
#pragma once

#include <ostream>  // before verb.hpp: Boost's string_view prints itself, and needs the full ostream

#include <boost/beast/http/verb.hpp>

#include <optional>
#include <string_view>

#include "net/static_assets.hpp"

namespace troupe::net {

enum class http_endpoint {
  cors_preflight,     // OPTIONS, when CORS is on
  health,             // GET /health
  models,             // GET /v1/models
  metrics,            // GET /metrics
  tokenize,           // POST /tokenize
  detokenize,         // POST /detokenize
  completions,        // POST /v1/completions
  chat_completions,   // POST /v1/chat/completions
  playground_config,  // GET /playground/config
  static_file,        // GET of an embedded file: the playground page
  method_not_allowed, // a path above with another method: 405
  not_found,          // 404
};

struct http_route {
  http_endpoint endpoint = http_endpoint::not_found;
  std::optional<static_asset> asset; // static_file: what to send
};

// cors_enabled: server.cors-origins is set, so that OPTIONS answers a browser's preflight.
http_route route_of(boost::beast::http::verb method, std::string_view target, bool cors_enabled);

// Does `target` need a key when keys are configured? The API does (every /v1/ path,
// /tokenize, /detokenize); /health and the playground's files do not, /metrics only
// with server.metrics-auth.
bool needs_api_key(std::string_view target, bool metrics_auth);

} // namespace troupe::net
