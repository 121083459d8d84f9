// The executor actor: owns a model runner (weights, KV pools) on its own
// thread, runs one forward step per run_step and samples the logits rows, and
// performs block copies for the KV cache (swap and copy-on-write).
#pragma once

#include <memory>

#include "actors/protocol.hpp"
#include "runtime/model_runner.hpp"

namespace troupe::actors {

// Spawned detached: a step may block its thread for as long as the model runs.
executor_actor spawn_executor(caf::actor_system& sys, std::shared_ptr<runtime::model_runner> runner);

} // namespace troupe::actors
