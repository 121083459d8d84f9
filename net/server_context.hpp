// What every session of one server shares: the actor system and the engine,
// the configuration, the model's description, metrics, and the connection
// count. Internal to net/.
#pragma once

#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "net/metrics.hpp"
#include "net/server.hpp"

namespace troupe::net {

struct server_context {
  caf::actor_system& sys;
  engine_actor engine;
  model_info info;
  server_config cfg;
  server_metrics metrics;
  std::atomic<int> connections{0};
  std::atomic<int> in_flight{0}; // generate requests the server has sent and not seen end
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
      : sys(s), engine(std::move(e)), info(std::move(i)), cfg(std::move(c)) {}
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

// Hands a connection that asked for it to the WebSocket session (ws_session.cpp).
void start_http_session(boost::asio::ip::tcp::socket socket, std::shared_ptr<server_context> ctx);

} // namespace troupe::net
