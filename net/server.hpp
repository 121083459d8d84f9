// troupe's network front door: one Boost.Beast server on its own io_context
// threads, serving WebSocket /v1/stream and the OpenAI-compatible HTTP API
// (with SSE), /health, /v1/models, /metrics, /tokenize and /detokenize.
// Everything it knows of the engine comes through engine_actor messages.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "net/api_keys.hpp"
#include "net/cors.hpp"
#include "net/request_limits.hpp"
#include "net/tls_context.hpp"
#include "troupe/engine.hpp"

namespace troupe::net {

// Every bound on what a client controls is here, with what the client gets past it.
struct server_config {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8080;                        // 0 = ephemeral
  int io_threads = 2;
  tls_files tls;                                    // set: the port speaks only HTTPS / WSS
  int max_connections = 2048;                        // beyond: 503 (HTTP) at accept
  std::size_t max_body_bytes = 1 << 20;             // HTTP request body; beyond: 413
  std::size_t max_header_bytes = 16 << 10;          // request line + headers; beyond: 431
  std::size_t max_ws_message_bytes = 1 << 20;       // beyond: the connection is closed (1009)
  std::size_t max_ws_backlog_bytes = 8 << 20;       // unsent frames to a slow reader; beyond: closed (1008)
  int max_in_flight_per_connection = 1024;          // WebSocket requests in flight; beyond: error frame
  int max_in_flight_per_key = 0;                    // generate requests per API key; beyond: 429 / error frame; 0 = any
  int queue_depth = 1024;                           // requests waiting in the engine; beyond: 429 / error frame
  std::chrono::milliseconds idle_timeout{60'000};   // keep-alive with no request / WebSocket with no traffic: closed
  std::chrono::milliseconds request_timeout{60'000}; // a request's head and body (and the TLS handshake); beyond: 408
  request_limits limits;
  api_keys keys;                                    // none: the API is open (bind 127.0.0.1 then)
  bool metrics_auth = false;                        // /metrics needs a key too
  cors_policy cors;                                 // no origins: CORS off
};

class server {
 public:
  server(caf::actor_system& sys, engine_actor engine, model_info info, server_config cfg);
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  // Loads the TLS files (when set), binds and starts the io threads; returns the bound
  // port. Throws tls_error for a bad certificate or key, std::runtime_error with the
  // address when it cannot bind.
  std::uint16_t start();
  // Stops accepting, closes sessions, joins the io threads.
  void stop();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace troupe::net
