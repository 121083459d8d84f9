// Engines in other processes: an engine published on a TCP port through CAF's middleman, and a
// handle to a published engine that takes the same messages as one spawned in this process
// (spawn_engine), so a front end or a host application does not care where its engine runs.
//
// Both actor systems need the middleman and troupe's message types: call enable_remote_engines on
// their configs before constructing them. A published engine listens on a loopback address only:
// peers are not authenticated yet, so reaching one from another host means a tunnel (ssh -L).
#pragma once

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "troupe/engine.hpp"

namespace troupe {

// How long a connected engine (or its client) may stay silent before the other side takes it for gone.
inline constexpr std::chrono::seconds remote_engine_timeout{5};

// Loads CAF's middleman into `cfg` (heartbeats every second, peers dropped after remote_engine_timeout of
// silence) and registers every message type an engine_actor takes or
// sends (request_spec, delta, finished, failed, engine_stats, model_info, token id lists, the
// sink's handle), by the names both sides must agree on.
void enable_remote_engines(caf::actor_system_config& cfg);

// Throws config_error unless `address` is loopback (127.0.0.1, ::1, localhost): a program checks it before
// loading a model that publish_engine would then refuse to publish.
void check_publish_address(const std::string& address);

// Publishes `engine` on address:port (port 0: an ephemeral one) and returns the port. Throws
// config_error for an address that is not loopback (127.0.0.1, ::1, localhost) or a port that
// cannot be bound.
std::uint16_t publish_engine(caf::actor_system& sys, const engine_actor& engine, const std::string& address,
                             std::uint16_t port);

// Connects to an engine published at host:port. Throws config_error naming host:port and the
// cause when it cannot be reached or what listens there is not an engine. A request to the
// handle after the engine's process died gets an error, never a hang; a sink that monitors the
// handle (net's bridge does) learns of it at once.
engine_actor connect_engine(caf::actor_system& sys, const std::string& host, std::uint16_t port);

// "host:port" split, for configuration values; throws config_error naming `what` and the value.
std::pair<std::string, std::uint16_t> parse_engine_address(const std::string& value, const std::string& what);

} // namespace troupe
