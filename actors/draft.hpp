// The draft actor: proposes draft tokens for the scheduler's speculating
// sequences (DESIGN.md §2, "Speculative decoding"). It owns a
// runtime::draft_proposer — a draft model with its own KV blocks, the target's
// first layers, or n-gram lookup — and runs detached: a draft model's steps
// are real work and must not hold up the scheduler's thread.
#pragma once

#include <memory>

#include "actors/protocol.hpp"
#include "runtime/draft_proposer.hpp"
#include "runtime/fault_injector.hpp"

namespace troupe::actors {

// The proposer outlives the actor: a restarted draft takes it over (the scheduler
// then has it forget every sequence). `faults` (null: none) arms its [debug] fault points.
// `restarted`: the proposer served a draft actor that died; it is reset first.
draft_actor spawn_draft(caf::actor_system& sys, std::shared_ptr<runtime::draft_proposer> proposer,
                        std::shared_ptr<runtime::fault_injector> faults = nullptr, bool restarted = false);

} // namespace troupe::actors
