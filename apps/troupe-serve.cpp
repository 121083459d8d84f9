// troupe-serve: loads the engine from an INI config (plus command-line
// overrides) and serves it over WebSocket /v1/stream and the OpenAI-compatible
// HTTP API until SIGINT or SIGTERM.
#include <caf/all.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "apps/stop_signals.hpp"
#include "net/server.hpp"
#include "troupe/engine.hpp"
#include "troupe/engine_system_config.hpp"
#include "troupe/remote_engine.hpp"
#include "troupe/router.hpp"

namespace {

// net::server_config's defaults are the [server] keys' defaults: written once, there.
const troupe::net::server_config server_defaults{};

int kib(std::size_t bytes) { return static_cast<int>(bytes >> 10); }
int seconds(std::chrono::milliseconds ms) {
  return static_cast<int>(std::chrono::duration_cast<std::chrono::seconds>(ms).count());
}

// The engine's categories plus [server].
struct serve_config : troupe::engine_system_config {
  std::string host = server_defaults.host;
  int port = server_defaults.port;
  int io_threads = server_defaults.io_threads;
  std::string tls_cert;
  std::string tls_key;
  int max_connections = server_defaults.max_connections;
  int max_prompt_tokens = server_defaults.limits.max_prompt_tokens;
  int max_tokens_limit = server_defaults.limits.max_tokens_limit;
  int max_stop_strings = static_cast<int>(server_defaults.limits.max_stop_strings);
  int max_stop_length = static_cast<int>(server_defaults.limits.max_stop_length);
  int max_json_depth = server_defaults.limits.max_json_depth;
  int max_logprobs = server_defaults.limits.max_logprobs;
  int queue_depth = server_defaults.queue_depth;
  int max_inflight_per_connection = server_defaults.max_in_flight_per_connection;
  int max_inflight_per_key = server_defaults.max_in_flight_per_key;
  int max_header_kib = kib(server_defaults.max_header_bytes);
  int max_body_kib = kib(server_defaults.max_body_bytes);
  int max_ws_message_kib = kib(server_defaults.max_ws_message_bytes);
  int max_ws_backlog_kib = kib(server_defaults.max_ws_backlog_bytes);
  int idle_timeout_s = seconds(server_defaults.idle_timeout);
  int request_timeout_s = seconds(server_defaults.request_timeout);
  std::vector<std::string> api_keys;
  std::string api_keys_file;
  bool metrics_auth = server_defaults.metrics_auth;
  std::vector<std::string> cors_origins;
  std::vector<std::string> router_engines;
  troupe::router_config router;

  serve_config() {
    caf::config_option_adder{custom_options_, "router"}
        .add(router_engines, "engines",
             "engines published by troupe-engine, as [\"HOST:PORT\", ...], served instead of loading a model "
             "here; two or more go behind a router")
        .add(router.policy, "policy", "with several engines: cache-aware (default), round-robin or least-loaded")
        .add(router.load_margin, "load-margin",
             "cache-aware: requests in flight a replica may have beyond the least loaded one and still get the "
             "prompts whose beginning it was sent");
    caf::config_option_adder{custom_options_, "server"}
        .add(host, "host", "address to bind (127.0.0.1 unless you mean to serve others)")
        .add(port, "port", "TCP port; 0 = an ephemeral port (printed at start)")
        .add(io_threads, "io-threads", "network threads")
        .add(tls_cert, "tls-cert", "PEM certificate chain; with tls-key the port serves only HTTPS and WSS")
        .add(tls_key, "tls-key", "PEM private key of tls-cert (unencrypted)")
        .add(max_connections, "max-connections", "open connections at most; beyond: 503")
        .add(max_prompt_tokens, "max-prompt-tokens", "prompt tokens at most (token-id prompts); beyond: 400")
        .add(max_tokens_limit, "max-tokens-limit", "largest max_tokens a request may ask for; beyond: 400")
        .add(max_stop_strings, "max-stop-strings", "stop strings per request at most; beyond: 400")
        .add(max_stop_length, "max-stop-length", "bytes per stop string at most; beyond: 400")
        .add(max_json_depth, "max-json-depth", "nesting of a request's JSON at most; beyond: 400")
        .add(max_logprobs, "max-logprobs", "largest logprobs / top_logprobs / prompt_logprobs; beyond: 400")
        .add(queue_depth, "queue-depth", "generate requests in flight at most; beyond: 429 / error frame")
        .add(max_inflight_per_connection, "max-inflight-per-connection",
             "WebSocket requests in flight per connection; beyond: error frame 'too_many_requests'")
        .add(max_inflight_per_key, "max-inflight-per-key",
             "generate requests in flight per API key; beyond: 429 / error frame; 0 = unlimited")
        .add(max_header_kib, "max-header-kib", "HTTP request line + headers limit (KiB); beyond: 431")
        .add(max_body_kib, "max-body-kib", "HTTP request body size limit (KiB); beyond: 413")
        .add(max_ws_message_kib, "max-ws-message-kib", "WebSocket message size limit (KiB); beyond: close 1009")
        .add(max_ws_backlog_kib, "max-ws-backlog-kib", "unsent frames to a slow reader (KiB); beyond: close 1008")
        .add(idle_timeout_s, "idle-timeout-s",
             "seconds a keep-alive connection may wait for a request, a WebSocket stay silent (pongs count)")
        .add(request_timeout_s, "request-timeout-s",
             "seconds for a whole request (head and body) and the TLS handshake; beyond: 408 and close")
        .add(api_keys, "api-keys", "keys the API requires as 'Authorization: Bearer <key>' (none: open)")
        .add(api_keys_file, "api-keys-file", "a file of keys, one per line (keeps keys out of INI files)")
        .add(metrics_auth, "metrics-auth", "/metrics needs a key too")
        .add(cors_origins, "cors-origins", "origins allowed to call the API from a browser (\"*\": any); none: CORS off");
  }

  troupe::net::server_config server() const {
    auto check = [](const char* key, long long v, long long lo, long long hi) {
      if (v < lo || v > hi)
        throw troupe::config_error("invalid value for server." + std::string(key) + ": '" + std::to_string(v) +
                                   "' (allowed: " + std::to_string(lo) + ".." + std::to_string(hi) + ")");
    };
    check("port", port, 0, 65535);
    check("io-threads", io_threads, 1, 64);
    check("max-connections", max_connections, 1, 100000);
    check("max-prompt-tokens", max_prompt_tokens, 1, 1 << 20);
    check("max-tokens-limit", max_tokens_limit, 1, 1 << 20);
    check("max-stop-strings", max_stop_strings, 0, 1024);
    check("max-stop-length", max_stop_length, 1, 1 << 16);
    check("max-json-depth", max_json_depth, 1, 1024);
    check("max-logprobs", max_logprobs, 0, troupe::max_logprobs);  // the engine refuses more
    check("queue-depth", queue_depth, 1, 1 << 20);
    check("max-inflight-per-connection", max_inflight_per_connection, 1, 1 << 20);
    check("max-inflight-per-key", max_inflight_per_key, 0, 1 << 20);
    check("max-header-kib", max_header_kib, 1, 1024);
    check("max-body-kib", max_body_kib, 1, 1 << 20);
    check("max-ws-message-kib", max_ws_message_kib, 1, 1 << 20);
    check("max-ws-backlog-kib", max_ws_backlog_kib, 1, 1 << 22);
    check("idle-timeout-s", idle_timeout_s, 1, 86400);
    check("request-timeout-s", request_timeout_s, 1, 86400);
    troupe::net::server_config s;
    s.host = host;
    s.port = static_cast<std::uint16_t>(port);
    s.io_threads = io_threads;
    s.tls = {tls_cert, tls_key};
    s.max_connections = max_connections;
    s.queue_depth = queue_depth;
    s.max_in_flight_per_connection = max_inflight_per_connection;
    s.max_in_flight_per_key = max_inflight_per_key;
    s.max_header_bytes = static_cast<std::size_t>(max_header_kib) << 10;
    s.max_body_bytes = static_cast<std::size_t>(max_body_kib) << 10;
    s.max_ws_message_bytes = static_cast<std::size_t>(max_ws_message_kib) << 10;
    s.max_ws_backlog_bytes = static_cast<std::size_t>(max_ws_backlog_kib) << 10;
    s.idle_timeout = std::chrono::seconds(idle_timeout_s);
    s.request_timeout = std::chrono::seconds(request_timeout_s);
    s.limits.max_prompt_tokens = max_prompt_tokens;
    s.limits.max_tokens_limit = max_tokens_limit;
    s.limits.max_stop_strings = static_cast<std::size_t>(max_stop_strings);
    s.limits.max_stop_length = static_cast<std::size_t>(max_stop_length);
    s.limits.max_json_depth = max_json_depth;
    s.limits.max_logprobs = max_logprobs;
    // Loaded here only to check the files: a bad certificate stops the start before the model loads.
    if (s.tls.enabled()) {
      try {
        troupe::net::make_tls_context(s.tls);
      } catch (const troupe::net::tls_error& e) {
        throw troupe::config_error(e.what());
      }
    }
    try {
      s.keys = troupe::net::api_keys(
          troupe::net::collect_api_keys(api_keys, api_keys_file, std::getenv("TROUPE_API_KEYS")));
    } catch (const std::exception& e) {
      throw troupe::config_error(e.what());
    }
    s.metrics_auth = metrics_auth;
    s.cors = troupe::net::cors_policy(cors_origins);
    return s;
  }
};

} // namespace

int main(int argc, char** argv) {
  const troupe::apps::stop_signals stop_signals; // before any thread starts

  serve_config cfg;
  troupe::net::server_config server_cfg;
  try {
    if (!cfg.load(std::vector<std::string>(argv + 1, argv + argc)))
      return 0;  // help printed
    server_cfg = cfg.server();
  } catch (const troupe::config_error& e) {
    std::cerr << "troupe-serve: " << e.what() << "\n";
    return 1;
  }
  std::vector<std::pair<std::string, std::uint16_t>> remotes;
  try {
    for (const auto& address : cfg.router_engines)
      remotes.push_back(troupe::parse_engine_address(address, "router.engines"));
    if (!remotes.empty())
      troupe::enable_remote_engines(cfg);
  } catch (const troupe::config_error& e) {
    std::cerr << "troupe-serve: " << e.what() << "\n";
    return 1;
  }
  caf::actor_system sys{cfg};
  troupe::engine_actor engine;
  const bool remote = !remotes.empty();
  try {
    if (!remote) {
      engine = troupe::spawn_engine(sys, cfg.engine);
    } else {
      std::vector<troupe::engine_actor> engines;
      for (const auto& [host, port] : remotes) {
        engines.push_back(troupe::connect_engine(sys, host, port));
        std::printf("serving the engine at %s:%u\n", host.c_str(), static_cast<unsigned>(port));
      }
      engine = engines.size() == 1 ? engines[0] : troupe::spawn_router(sys, std::move(engines), cfg.router);
      if (remotes.size() > 1)
        std::printf("routing %s over %zu engines\n", cfg.router.policy.c_str(), remotes.size());
    }
  } catch (const std::exception& e) {
    std::cerr << "troupe-serve: cannot start the engine: " << e.what() << "\n";
    return 1;
  }
  troupe::model_info info;
  {
    caf::scoped_actor self{sys};
    self->request(engine, caf::infinite, troupe::info_atom::value)
        .receive([&](troupe::model_info& i) { info = std::move(i); }, [](caf::error&) {});
  }
  int status = 0;
  {
    troupe::net::server server(sys, engine, info, server_cfg);
    try {
      auto port = server.start();
      const bool tls = server_cfg.tls.enabled();
      const char* http_scheme = tls ? "https" : "http";
      std::printf("listening on %s:%u%s\n", server_cfg.host.c_str(), static_cast<unsigned>(port),
                  tls ? " (TLS: https and wss only)" : "");
      if (!server_cfg.keys.required() && server_cfg.host != "127.0.0.1" && server_cfg.host != "::1" &&
          server_cfg.host != "localhost")
        std::fprintf(stderr,
                     "troupe-serve: warning: serving on %s without API keys: anyone who can reach this port can use "
                     "the model (set server.api-keys, server.api-keys-file or TROUPE_API_KEYS)\n",
                     server_cfg.host.c_str());
      std::printf("try: curl %s%s://%s:%u/v1/completions -H 'Content-Type: application/json' "
                  "-d '{\"prompt\": \"Once upon a time\", \"max_tokens\": 64}'\n",
                  tls ? "--cacert CERT.pem " : "", http_scheme, server_cfg.host.c_str(), static_cast<unsigned>(port));
      if (!tls)
        std::printf("  or stream over WebSocket: build/bin/troupe-client --url ws://%s:%u/v1/stream \"Once upon a "
                    "time\"\n",
                    server_cfg.host.c_str(), static_cast<unsigned>(port));
      std::printf("  or open %s://%s:%u/ in a browser (the playground)\n", http_scheme, server_cfg.host.c_str(),
                  static_cast<unsigned>(port));
      std::fflush(stdout);
      const int sig = stop_signals.wait();
      std::fprintf(stderr, "troupe-serve: signal %d, shutting down\n", sig);
    } catch (const std::exception& e) {
      std::cerr << "troupe-serve: " << e.what() << "\n";
      status = 1;
    }
    server.stop();
  }
  // A remote engine belongs to its own process; a router (several of them) ends here.
  if (!remote || remotes.size() > 1)
    caf::anon_send_exit(engine, caf::exit_reason::user_shutdown);
  return status;
}
