// Draft actor: forget the ended sequences, propose for the rest.
#include "actors/draft.hpp"

#include <chrono>

namespace troupe::actors {

namespace {

struct draft_state {
  std::shared_ptr<runtime::draft_proposer> proposer;
  std::shared_ptr<runtime::fault_injector> faults;
  std::vector<runtime::draft_input> inputs;
  static inline const char* name = "draft";
};

draft_actor::behavior_type draft_behavior(draft_actor::stateful_pointer<draft_state> self,
                                          std::shared_ptr<runtime::draft_proposer> proposer,
                                          std::shared_ptr<runtime::fault_injector> faults, bool restarted) {
  self->state.proposer = std::move(proposer);
  self->state.faults = std::move(faults);
  // Its last owner died mid-proposal, perhaps mid-update, and forget lists may have died with it.
  if (restarted)
    self->state.proposer->reset();
  return {
      [self](propose_atom, draft_request& req) -> caf::result<draft_reply> {
        auto& st = self->state;
        draft_reply reply;
        try {
          // Ended sequences first: a failed proposal must not cost their draft state's release.
          for (auto id : req.forget)
            st.proposer->forget(id);
        } catch (const std::exception& e) {
          return caf::make_error(caf::sec::runtime_error, std::string("draft failed: ") + e.what());
        }
        // Outside the try: the actor dies, the engine restarts it.
        runtime::maybe_throw(st.faults.get(), runtime::fault_point::draft_crash);
        try {
          runtime::maybe_throw(st.faults.get(), runtime::fault_point::draft);
          st.inputs.clear();
          for (const auto& e : req.seqs)
            st.inputs.push_back({e.id, e.history, e.k, &e.params, e.seed, e.step, e.prompt_len, e.reproducible});
          auto t0 = std::chrono::steady_clock::now();
          auto outputs = st.proposer->propose(st.inputs);
          reply.draft_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
          for (std::size_t i = 0; i < outputs.size(); ++i)
            reply.proposals.push_back({req.seqs[i].id, std::move(outputs[i].tokens), std::move(outputs[i].probs)});
        } catch (const std::exception& e) {
          // The scheduler runs the step without speculation.
          return caf::make_error(caf::sec::runtime_error, std::string("draft failed: ") + e.what());
        }
        return reply;
      },
  };
}

} // namespace

draft_actor spawn_draft(caf::actor_system& sys, std::shared_ptr<runtime::draft_proposer> proposer,
                        std::shared_ptr<runtime::fault_injector> faults, bool restarted) {
  return sys.spawn<caf::detached>(draft_behavior, std::move(proposer), std::move(faults), restarted);
}

} // namespace troupe::actors
