// Publishing an engine and connecting to one through CAF's middleman (see troupe/remote_engine.hpp).
#include "troupe/remote_engine.hpp"

#include <caf/io/middleman.hpp>

#include "troupe/errors.hpp"

namespace troupe {

void enable_remote_engines(caf::actor_system_config& cfg) {
  cfg.load<caf::io::middleman>();
  // Both sides send a heartbeat every second and drop a peer silent for 5: an engine whose host vanished
  // without closing the connection (a pulled cable, a frozen process) is seen as gone within seconds, not
  // never (CAF's default sends no heartbeats).
  cfg.set("middleman.heartbeat-interval", caf::timespan{std::chrono::seconds(1)});
  cfg.set("middleman.connection-timeout", caf::timespan{remote_engine_timeout});
  // The names travel with every message and make up a typed actor's interface, which
  // connect_engine checks against what the publisher offers: they must never change.
  cfg.add_message_type<request_spec>("troupe::request_spec");
  cfg.add_message_type<sink_actor>("troupe::sink_actor");
  cfg.add_message_type<delta>("troupe::delta");
  cfg.add_message_type<finished>("troupe::finished");
  cfg.add_message_type<failed>("troupe::failed");
  cfg.add_message_type<engine_stats>("troupe::engine_stats");
  cfg.add_message_type<model_info>("troupe::model_info");
  cfg.add_message_type<std::vector<token_id>>("troupe::token_ids");
}

void check_publish_address(const std::string& address) {
  if (address != "127.0.0.1" && address != "::1" && address != "localhost")
    throw config_error("engine-server.host: '" + address +
                       "' is not a loopback address: peers of a published engine are not authenticated yet, so it "
                       "listens on 127.0.0.1, ::1 or localhost only (reach it from another host through a tunnel, "
                       "e.g. ssh -L)");
}

std::uint16_t publish_engine(caf::actor_system& sys, const engine_actor& engine, const std::string& address,
                             std::uint16_t port) {
  check_publish_address(address);
  auto bound = sys.middleman().publish(engine, port, address.c_str(), true);
  if (!bound)
    throw config_error("cannot publish the engine on " + address + ":" + std::to_string(port) + ": " +
                       sys.render(bound.error()));
  return *bound;
}

engine_actor connect_engine(caf::actor_system& sys, const std::string& host, std::uint16_t port) {
  auto engine = sys.middleman().remote_actor<engine_actor>(host, port);
  if (!engine)
    throw config_error("cannot reach an engine at " + host + ":" + std::to_string(port) + ": " +
                       sys.render(engine.error()));
  return *engine;
}

std::pair<std::string, std::uint16_t> parse_engine_address(const std::string& value, const std::string& what) {
  const auto colon = value.rfind(':');
  const auto bad = [&](const std::string& why) {
    return config_error(what + ": '" + value + "' " + why + " (expected host:port, e.g. 127.0.0.1:7000)");
  };
  if (colon == std::string::npos)
    throw bad("has no port");
  if (colon == 0)
    throw bad("has no host");
  std::string host = value.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') // [::1]:7000
    host = host.substr(1, host.size() - 2);
  const std::string digits = value.substr(colon + 1);
  if (digits.empty() || digits.size() > 5 || digits.find_first_not_of("0123456789") != std::string::npos)
    throw bad("has no port number");
  const int port = std::stoi(digits);
  if (port < 1 || port > 65535)
    throw bad("has a port outside 1-65535");
  return {host, static_cast<std::uint16_t>(port)};
}

} // namespace troupe
