// A router in front of several engines (data parallelism): itself an engine_actor, so net/ and a host
// application use it as one engine. Each generate goes to one replica (runtime/replica_chooser:
// cache-aware by default, round-robin or least-loaded); its deltas come back through a relay that gives
// them the router's request id. A replica that goes away: its requests that have no token yet go to
// another replica, those with tokens fail with engine_unavailable, new requests go to the live ones; with
// none left the router ends, and whoever monitors it (the server) sees the engine gone.
#pragma once

#include <caf/actor_system.hpp>
#include <string>
#include <vector>

#include "troupe/engine.hpp"

namespace troupe {

struct router_config {
  std::string policy = "cache-aware"; // cache-aware | round-robin | least-loaded
  // cache-aware: the replica that was sent a prompt's beginning gets the request unless it has more than
  // this many requests in flight beyond the least loaded replica.
  int load_margin = 8;
  int prefix_block_bytes = 64;          // the prompt's text is matched in blocks of this many bytes ...
  int max_prefix_blocks = 256;          // ... at most this many from its start
  int max_blocks_per_replica = 1 << 16; // the routing table's bound per replica (least recently routed go)
};

// Spawns a router over `engines` (at least one; local, remote or both). Asks each engine what it
// serves: throws config_error for a bad router_config value or engines that serve different models.
engine_actor spawn_router(caf::actor_system& sys, std::vector<engine_actor> engines, const router_config& cfg);

} // namespace troupe
