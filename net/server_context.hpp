// What every session of one server shares: the actor system and the engine,
// the configuration, the model's description, metrics, the TLS context, and
// the connection and in-flight counts. Internal to net/.
#pragma once

#include <boost/asio/ssl/context.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <caf/all.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "net/inflight_per_key.hpp"
#include "net/metrics.hpp"
#include "net/server.hpp"
#include "net/session_stream.hpp"

namespace troupe::net {

struct server_context {
  caf::actor_system& sys;
  engine_actor engine;
  model_info info;
  server_config cfg;
  server_metrics metrics;
  std::atomic<int> connections{0};
  std::atomic<int> in_flight{0}; // generate requests the server has sent and not seen end
  // false once the engine is gone (one in another process died or became unreachable; server::start watches it):
  // /health answers 503 and the routes that would ask the engine answer 503 at once instead of waiting.
  std::atomic<bool> engine_up{true};
  inflight_per_key key_in_flight;
  std::shared_ptr<boost::asio::ssl::context> tls; // set: every connection starts with a TLS handshake
  std::atomic<std::uint64_t> next_response_id{1};

  // Pushes from CAF threads check this gate: once the server stops, nothing
  // more is posted to an io_context that is going away.
  std::mutex gate_mutex;
  bool gate_open = true;

  // Every live bridge, so that stop() can end them: a session waiting on the
  // engine when the server stops is never resumed, and its bridge would
  // otherwise keep the actor system from shutting down.
  std::mutex bridges_mutex;
  std::vector<caf::actor> bridges;

  void register_bridge(const caf::actor& b) {
    std::lock_guard lock{bridges_mutex};
    bridges.push_back(b);
  }
  void end_bridge(const caf::actor& b) {
    {
      std::lock_guard lock{bridges_mutex};
      std::erase(bridges, b);
    }
    caf::anon_send_exit(b, caf::exit_reason::user_shutdown);
  }
  void end_all_bridges() {
    std::lock_guard lock{bridges_mutex};
    for (auto& b : bridges)
      caf::anon_send_exit(b, caf::exit_reason::user_shutdown);
    bridges.clear();
  }

  // Sessions waiting on the engine, held here rather than by themselves, so that
  // stop() can let go of those the engine will never answer.
  std::mutex held_mutex;
  std::unordered_map<const void*, std::shared_ptr<void>> held;

  void hold(const void* key, std::shared_ptr<void> session) {
    std::lock_guard lock{held_mutex};
    held[key] = std::move(session);
  }
  std::shared_ptr<void> release(const void* key) {
    std::lock_guard lock{held_mutex};
    auto it = held.find(key);
    if (it == held.end())
      return nullptr;
    auto out = std::move(it->second);
    held.erase(it);
    return out;
  }
  void release_all() {
    std::unordered_map<const void*, std::shared_ptr<void>> gone;
    {
      std::lock_guard lock{held_mutex};
      gone.swap(held);
    }
  } // the sessions are destroyed here, outside the lock (their destructors may call back)

  server_context(caf::actor_system& s, engine_actor e, model_info i, server_config c)
      : sys(s), engine(std::move(e)), info(std::move(i)), cfg(std::move(c)), key_in_flight(cfg.max_in_flight_per_key) {}
};

// Counts a connection for as long as it lives.
class connection_slot {
 public:
  explicit connection_slot(std::shared_ptr<server_context> ctx) : ctx_(std::move(ctx)) { ++ctx_->connections; }
  ~connection_slot() { --ctx_->connections; }
  connection_slot(const connection_slot&) = delete;
  connection_slot& operator=(const connection_slot&) = delete;

 private:
  std::shared_ptr<server_context> ctx_;
};

// A new connection (http_session.cpp); over TLS it starts with the handshake.
void start_http_session(plain_stream stream, std::shared_ptr<server_context> ctx);
void start_http_session(tls_stream stream, std::shared_ptr<server_context> ctx);

// A connection whose request asked to upgrade on /v1/stream (ws_session.cpp). `key`: the API
// key it showed, if any; `authorized`: it showed a valid one, or none is needed.
template <class Stream>
void start_ws_session(Stream stream, boost::beast::http::request<boost::beast::http::string_body> upgrade,
                      std::shared_ptr<server_context> ctx, std::unique_ptr<connection_slot> slot,
                      std::optional<std::size_t> key, bool authorized);

} // namespace troupe::net
