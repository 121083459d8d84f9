// Rank executor: one rank's forward pass and block copies, as the group's leader asks.
#include "actors/rank_executor.hpp"

#include <exception>
#include <string>

#include "runtime/collective.hpp"
#include "runtime/fault_injector.hpp"

namespace troupe::actors {

namespace {

struct rank_executor_state {
  int rank = 0;
  std::shared_ptr<runtime::model_runner> runner;
  static inline const char* name = "rank_executor";
};

rank_executor_actor::behavior_type rank_executor_behavior(
    rank_executor_actor::stateful_pointer<rank_executor_state> self, int rank,
    std::shared_ptr<runtime::model_runner> runner) {
  self->state.rank = rank;
  self->state.runner = std::move(runner);
  // A rank that dies releases the others before it goes (CAF calls this before the actor ends,
  // and so before its leader hears of it), whatever killed it.
  self->set_exception_handler([self](std::exception_ptr& eptr) -> caf::error {
    self->state.runner->abort_group();
    try {
      std::rethrow_exception(eptr);
    } catch (const std::exception& e) {
      return caf::make_error(caf::sec::runtime_error, std::string(e.what()));
    } catch (...) {
    }
    return caf::make_error(caf::sec::runtime_error, std::string("an exception of unknown type"));
  });
  return {
      [self](follow_atom, rank_step& step) -> rank_done {
        auto& st = self->state;
        // Outside the try: the actor dies (the exception handler above), and its group with it.
        if (step.inject_crash)
          throw runtime::injected_fault(runtime::fault_point::executor_crash);
        rank_done done;
        try {
          if (step.inject_step_fault)
            throw runtime::injected_fault(runtime::fault_point::executor_step);
          st.runner->follow_step(step.batch);
        } catch (const runtime::collective_aborted& e) {
          done.error = e.what();
          done.aborted = true;
        } catch (const std::exception& e) {
          st.runner->abort_group(); // the other ranks stop at their next collective instead of waiting for this one
          done.error = e.what();
        }
        return done;
      },
      [self](copy_atom, copy_request& req) -> rank_done {
        rank_done done;
        try {
          self->state.runner->copy_blocks(req.kind, req.pairs);
        } catch (const std::exception& e) {
          done.error = e.what();
        }
        return done;
      },
  };
}

} // namespace

rank_executor_actor spawn_rank_executor(caf::actor_system& sys, int rank,
                                        std::shared_ptr<runtime::model_runner> runner) {
  return sys.spawn<caf::detached>(rank_executor_behavior, rank, std::move(runner));
}

} // namespace troupe::actors
