// The kv_cache actor: owns the block manager (device and host tiers, prefix
// index) and, once per step, does everything the cache needs before the step
// runs: frees, swaps (copies through the executor), copy-on-write, and block
// reservations for the step's work.
#pragma once

#include "actors/protocol.hpp"
#include "runtime/block_manager.hpp"

namespace troupe::actors {

kv_cache_actor spawn_kv_cache(caf::actor_system& sys, runtime::block_manager_config cfg, executor_actor executor,
                              std::size_t block_bytes, bool check_invariants);

} // namespace troupe::actors
