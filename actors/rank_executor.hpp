// A tensor-parallel rank that does not lead: rank r's model runner on a thread of its own,
// running the steps and block copies that the group's executor (rank 0) sends it.
#pragma once

#include <memory>

#include "actors/protocol.hpp"
#include "runtime/model_runner.hpp"

namespace troupe::actors {

// Spawned detached: its forward pass blocks in the collectives until every rank is there.
// When the rank fails or dies inside a step it aborts its group (model_runner::abort_group),
// so that no other rank waits for it. The runner outlives the actor.
rank_executor_actor spawn_rank_executor(caf::actor_system& sys, int rank,
                                        std::shared_ptr<runtime::model_runner> runner);

} // namespace troupe::actors
