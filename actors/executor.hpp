// The executor actor: owns a model runner (weights, KV pools) on its own
// thread, runs one forward step per run_step and samples the logits rows, and
// performs block copies for the KV cache (swap and copy-on-write). With tensor
// parallelism it is rank 0 of a group and leads the other ranks' executors.
#pragma once

#include <memory>
#include <vector>

#include "actors/protocol.hpp"
#include "runtime/collective.hpp"
#include "runtime/fault_injector.hpp"
#include "runtime/model_runner.hpp"
#include "runtime/structured/constraint_cache.hpp"

namespace troupe::actors {

// Spawned detached: a step may block its thread for as long as the model runs.
// The runner outlives the actor: a restarted executor takes over the same weights
// and KV cache. `faults` (null: none) arms the executor's [debug] fault points. `constraints`
// (null: none) holds the compiled structured-output constraints; a sequence that has one needs it.
executor_actor spawn_executor(caf::actor_system& sys, std::shared_ptr<runtime::model_runner> runner,
                              std::shared_ptr<runtime::fault_injector> faults = nullptr,
                              std::shared_ptr<runtime::structured::constraint_cache> constraints = nullptr);

// N > 1 tensor-parallel ranks as executor actors, each detached: ranks[r] is rank r's runner,
// which meets the others through its group's collectives (CPU threads' shared memory, or a GPU
// group's peer loads and NCCL). Returns rank 0's executor, which the scheduler and kv_cache
// talk to as to one executor: it sends every step and block copy to ranks 1..N-1 (rank
// executors, actors/rank_executor.hpp), does rank 0's part and sampling, and replies once all
// have answered. A rank that fails in a step aborts the group (model_runner::abort_group) and
// the step fails naming it; a rank that dies takes the group down (the ranks are linked), and
// the engine restarts the group over the same runners after reset_group(). The runners outlive
// the actors. Throws std::invalid_argument unless there are two or more ranks.
executor_actor spawn_executor_group(caf::actor_system& sys, std::vector<std::shared_ptr<runtime::model_runner>> ranks,
                                    std::shared_ptr<runtime::fault_injector> faults = nullptr,
                                    std::shared_ptr<runtime::structured::constraint_cache> constraints = nullptr);

} // namespace troupe::actors
