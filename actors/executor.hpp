// The executor actor: owns a model runner (weights, KV pools) on its own
// thread, runs one forward step per run_step and samples the logits rows, and
// performs block copies for the KV cache (swap and copy-on-write).
#pragma once

#include <memory>

#include "actors/protocol.hpp"
#include "runtime/fault_injector.hpp"
#include "runtime/model_runner.hpp"

namespace troupe::actors {

// Spawned detached: a step may block its thread for as long as the model runs.
// The runner outlives the actor: a restarted executor takes over the same weights
// and KV cache. `faults` (null: none) arms the executor's [debug] fault points.
executor_actor spawn_executor(caf::actor_system& sys, std::shared_ptr<runtime::model_runner> runner,
                              std::shared_ptr<runtime::fault_injector> faults = nullptr);

} // namespace troupe::actors
