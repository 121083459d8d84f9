// Executor: forward pass + sampling per step, block copies on request.
#include "actors/executor.hpp"

#include <chrono>
#include <exception>

#include "runtime/step_sampler.hpp"

namespace troupe::actors {

namespace {

struct executor_state {
  std::shared_ptr<runtime::model_runner> runner;
  runtime::step_sampler sampler;
  std::vector<float> logits;
  std::vector<runtime::sample_request> rows;
  static inline const char* name = "executor";
};

using clock = std::chrono::steady_clock;
double micros_since(clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock::now() - t0).count();
}

executor_actor::behavior_type executor_behavior(executor_actor::stateful_pointer<executor_state> self,
                                                std::shared_ptr<runtime::model_runner> runner) {
  self->state.runner = std::move(runner);
  return {
      [self](run_step_atom, step_request& req) -> step_result {
        auto& st = self->state;
        step_result result;
        result.step_id = req.batch.step_id;
        try {
          for (auto id : req.forget)
            st.sampler.forget(id);
          for (std::size_t i = 0; i < req.reset_ids.size(); ++i)
            st.sampler.reset(req.reset_ids[i], req.reset_tokens[i]);
          const int vocab = st.runner->config().vocab_size;
          st.logits.resize(req.batch.logits_rows.size() * static_cast<std::size_t>(vocab));
          auto t0 = clock::now();
          st.runner->execute(req.batch, st.logits);
          result.forward_us = micros_since(t0);
          auto t1 = clock::now();
          st.sampler.observe(req.batch, req.seq_ids);
          st.rows.clear();
          for (const auto& r : req.rows)
            st.rows.push_back({r.id, &r.params, r.seed, r.step, r.prompt_len});
          result.sampled = st.sampler.sample(st.logits, vocab, st.rows);
          result.sample_us = micros_since(t1);
        } catch (const std::exception& e) {
          // The step is lost, the executor is not: the scheduler fails the step's requests.
          result.sampled.clear();
          result.error = e.what();
        }
        return result;
      },
      [self](copy_atom, copy_request& req) -> caf::result<done_atom> {
        try {
          self->state.runner->copy_blocks(req.kind, req.pairs);
        } catch (const std::exception& e) {
          return caf::make_error(caf::sec::runtime_error, std::string("block copy failed: ") + e.what());
        }
        return done_atom::value;
      },
  };
}

} // namespace

executor_actor spawn_executor(caf::actor_system& sys, std::shared_ptr<runtime::model_runner> runner) {
  return sys.spawn<caf::detached>(executor_behavior, std::move(runner));
}

} // namespace troupe::actors
