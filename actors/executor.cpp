// Executor: forward pass + sampling per step, block copies on request.
#include "actors/executor.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>

#include "actors/rank_executor.hpp"
#include "runtime/device_sampling.hpp"
#include "runtime/logprobs.hpp"
#include "runtime/spec_verifier.hpp"
#include "runtime/step_sampler.hpp"

namespace troupe::actors {

namespace {

struct executor_state {
  std::shared_ptr<runtime::model_runner> runner;
  std::shared_ptr<runtime::fault_injector> faults;
  runtime::step_sampler sampler;
  std::vector<float> logits;
  std::vector<float> sample_logits;     // the sampled rows, packed, when prompt rows sit between them
  std::vector<float> raw_rows;          // rows that asked for logprobs, before the sampler changes them
  std::vector<std::size_t> sample_rows; // indices into step_request::rows that are sampled
  std::vector<runtime::sample_request> rows;
  runtime::spec_verifier verifier;
  std::vector<token_id> emitted;
  std::vector<runtime::device_sample> device_rows; // a step sampled on the device: one per logits row
  std::vector<token_id> device_tokens;             // ...and its tokens, one per logits row
  std::vector<runtime::token_logprobs> device_logprobs;
  std::vector<std::int32_t> logits_owner;      // logits row -> rows index (>= 0), verify row (-1), unset (-2)
  std::vector<runtime::logit_edits> row_edits; // a constrained verification's rows
  // A device step's constrained rows, whose masks are computed while the forward pass runs.
  struct pending_mask {
    std::size_t row; // into device_rows
    seq_id id;
    std::uint64_t output_index;
    std::span<const token_id> output;
  };
  std::vector<pending_mask> pending_masks;
  static inline const char* name = "executor";
};

using clock = std::chrono::steady_clock;
double micros_since(clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock::now() - t0).count();
}

// The output part of a history (the tokens after the prompt's prompt_len).
std::span<const token_id> output_part(std::span<const token_id> history, int prompt_len) {
  return history.subspan(std::min(history.size(), static_cast<std::size_t>(std::max(prompt_len, 0))));
}
std::span<const token_id> output_of(const executor_state& st, seq_id id, int prompt_len) {
  return output_part(st.sampler.history(id), prompt_len);
}

// A step is sampled on the device when the runner can and nothing needs its logits on the
// host: every logits row samples or scores, either a sample row, a prompt row (its token's
// logprob and the top n), or a row of a verification decided by the target's own draws
// (greedy, or a draft without probabilities: runtime::accept_target_draws). Penalties, logit
// edits and logprobs are the device's too. Fills
// device_rows in logits order (their histories are the sampler's: observe() has seen the step's
// tokens, the drafts included, so verify row i reads the history up to x_i-1).
bool plan_device_sampling(executor_state& st, const step_request& req) {
  const auto n = static_cast<std::int32_t>(req.batch.logits_rows.size());
  st.logits_owner.assign(static_cast<std::size_t>(n), -2);
  auto claim = [&](std::int32_t index, std::int32_t owner) {
    if (index < 0 || index >= n || st.logits_owner[static_cast<std::size_t>(index)] != -2)
      return false;
    st.logits_owner[static_cast<std::size_t>(index)] = owner;
    return true;
  };
  for (std::size_t i = 0; i < req.rows.size(); ++i)
    if (!claim(req.rows[i].logits_index, static_cast<std::int32_t>(i)))
      return false;
  for (const auto& v : req.verify) {
    if (!runtime::verified_by_target_draws(v.params, v.draft_probs))
      return false;
    for (std::size_t j = 0; j <= v.draft.size(); ++j)
      if (!claim(v.first_logits_index + static_cast<std::int32_t>(j), -1))
        return false;
  }
  if (std::find(st.logits_owner.begin(), st.logits_owner.end(), -2) != st.logits_owner.end())
    return false;
  st.device_rows.assign(static_cast<std::size_t>(n), {});
  st.pending_masks.clear();
  // A row's edits now, but a constrained row's mask only in finish_constrained_rows (while the
  // device computes): until then it has its logit rules alone.
  auto edits_of = [&](std::size_t row, seq_id id, std::uint64_t output_index, std::span<const token_id> output) {
    if (!st.sampler.constrained(id))
      return st.sampler.edits(id, output_index, output);
    st.pending_masks.push_back({row, id, output_index, output});
    return st.sampler.rules(id).at(output_index);
  };
  for (const auto& r : req.rows) {
    const auto row = static_cast<std::size_t>(r.logits_index);
    st.device_rows[row] =
        r.score_target >= 0
            ? runtime::make_device_score(r.score_target, r.params.prompt_logprobs)
            : runtime::make_device_sample(r.params, r.seed, r.step, st.sampler.history(r.id), r.prompt_len,
                                          edits_of(row, r.id, r.step, output_of(st, r.id, r.prompt_len)));
  }
  for (const auto& v : req.verify) {
    const auto history = st.sampler.history(v.id);
    const std::size_t k = v.draft.size(), before_drafts = history.size() - k;
    for (std::size_t j = 0; j <= k; ++j) {
      const auto before = history.first(before_drafts + j);
      const auto index = static_cast<std::size_t>(v.first_logits_index) + j;
      auto row = runtime::make_device_sample(v.params, v.seed, v.step + j, before, v.prompt_len,
                                             edits_of(index, v.id, v.step + j, output_part(before, v.prompt_len)));
      row.logprobs = -1; // verified tokens carry none (as on the host)
      st.device_rows[index] = row;
    }
  }
  for (const auto& p : st.pending_masks)
    st.device_rows[p.row].constrained = true;
  return st.runner->samples_on_device(st.device_rows);
}

// execute_sampled's before_draw: the constrained rows' masks, computed on this thread while the
// device runs the step's forward pass (issue 42: the mask off the critical path).
void finish_constrained_rows(executor_state& st) {
  for (const auto& p : st.pending_masks)
    st.device_rows[p.row].edits = st.sampler.edits(p.id, p.output_index, p.output);
}

// A step sampled on the device: each row's token (and logprobs) from its logits row, and each
// verification's emitted tokens from its rows' draws.
void collect_device_step(executor_state& st, const step_request& req, step_result& result) {
  result.sampled.resize(req.rows.size());
  const bool any_logprobs = !st.device_logprobs.empty();
  result.logprobs.assign(any_logprobs ? req.rows.size() : 0, {});
  for (std::size_t i = 0; i < req.rows.size(); ++i) {
    const auto index = static_cast<std::size_t>(req.rows[i].logits_index);
    result.sampled[i] = st.device_tokens[index];
    if (any_logprobs)
      result.logprobs[i] = std::move(st.device_logprobs[index]);
  }
  result.verified.resize(req.verify.size());
  for (std::size_t i = 0; i < req.verify.size(); ++i) {
    const auto& v = req.verify[i];
    const std::size_t k = v.draft.size();
    st.emitted.resize(k + 1);
    const auto draws =
        std::span<const token_id>(st.device_tokens).subspan(static_cast<std::size_t>(v.first_logits_index), k + 1);
    const auto r = runtime::accept_target_draws(v.draft, draws, st.emitted);
    result.verified[i].assign(st.emitted.begin(), st.emitted.begin() + r.emitted);
  }
}

bool wants_logprobs(const sample_row& r) {
  return r.score_target >= 0 ? r.params.prompt_logprobs >= 0 : r.params.logprobs >= 0;
}

// Samples the rows that sample and scores the prompt rows. Log-probabilities
// come from the raw logits, so the rows that ask are kept before the sampler
// applies penalties and temperature to its rows in place.
void sample_step(executor_state& st, const step_request& req, int vocab, step_result& result) {
  const auto v = static_cast<std::size_t>(vocab);
  bool any_logprobs = false, rows_need_packing = false;
  st.sample_rows.clear();
  st.rows.clear();
  for (std::size_t i = 0; i < req.rows.size(); ++i) {
    const auto& r = req.rows[i];
    any_logprobs |= wants_logprobs(r);
    // Rows out of step with the logits (prompt rows, verification rows between them) need packing.
    rows_need_packing |= r.score_target >= 0 || r.logits_index != static_cast<std::int32_t>(i);
    if (r.score_target >= 0)
      continue;
    st.sample_rows.push_back(i);
    st.rows.push_back({r.id, &r.params, r.seed, r.step, r.prompt_len});
  }
  if (any_logprobs) {
    st.raw_rows.resize(req.rows.size() * v);
    for (std::size_t i = 0; i < req.rows.size(); ++i)
      if (wants_logprobs(req.rows[i]))
        std::copy_n(st.logits.begin() + static_cast<std::size_t>(req.rows[i].logits_index) * v, v,
                    st.raw_rows.begin() + i * v);
  }
  std::span<float> to_sample = st.logits;
  if (rows_need_packing) {
    st.sample_logits.resize(st.sample_rows.size() * v);
    for (std::size_t k = 0; k < st.sample_rows.size(); ++k)
      std::copy_n(st.logits.begin() + static_cast<std::size_t>(req.rows[st.sample_rows[k]].logits_index) * v, v,
                  st.sample_logits.begin() + k * v);
    to_sample = st.sample_logits;
  }
  auto sampled = st.sampler.sample(to_sample, vocab, st.rows);
  result.sampled.assign(req.rows.size(), -1);
  for (std::size_t k = 0; k < st.sample_rows.size(); ++k)
    result.sampled[st.sample_rows[k]] = sampled[k];
  for (std::size_t i = 0; i < req.rows.size(); ++i)
    if (req.rows[i].score_target >= 0)
      result.sampled[i] = req.rows[i].score_target;
  if (!any_logprobs)
    return;
  result.logprobs.resize(req.rows.size());
  for (std::size_t i = 0; i < req.rows.size(); ++i) {
    const auto& r = req.rows[i];
    if (!wants_logprobs(r))
      continue;
    const int top_n = r.score_target >= 0 ? r.params.prompt_logprobs : r.params.logprobs;
    result.logprobs[i] =
        runtime::compute_logprobs(std::span<const float>(st.raw_rows).subspan(i * v, v), result.sampled[i], top_n);
  }
}

// Speculating sequences: their k + 1 rows decide how many drafts stand
// (runtime::spec_verifier). The sampler's history already holds the drafts
// (observe() saw the step's tokens); the verifier wants the history before them.
void verify_step(executor_state& st, const step_request& req, int vocab, step_result& result) {
  const auto v = static_cast<std::size_t>(vocab);
  result.verified.resize(req.verify.size());
  for (std::size_t i = 0; i < req.verify.size(); ++i) {
    const auto& s = req.verify[i];
    const std::size_t k = s.draft.size();
    auto history = st.sampler.history(s.id);
    runtime::spec_input in;
    in.params = &s.params;
    in.seed = s.seed;
    in.step = s.step;
    in.history = history.first(history.size() - k);
    in.prompt_len = static_cast<std::size_t>(s.prompt_len);
    in.draft = s.draft;
    in.draft_probs = s.draft_probs;
    in.target_logits =
        std::span<float>(st.logits).subspan(static_cast<std::size_t>(s.first_logits_index) * v, (k + 1) * v);
    in.vocab = vocab;
    in.rules = &st.sampler.rules(s.id);
    if (!st.sampler.rules(s.id).constraint.empty()) {
      st.row_edits.clear();
      for (std::size_t j = 0; j <= k; ++j)
        st.row_edits.push_back(
            st.sampler.edits(s.id, s.step + j, output_part(history.first(history.size() - k + j), s.prompt_len)));
      in.row_edits = st.row_edits;
    }
    st.emitted.resize(k + 1);
    auto r = st.verifier.verify(in, st.emitted);
    result.verified[i].assign(st.emitted.begin(), st.emitted.begin() + r.emitted);
  }
}

// The step on this executor's runner, sampled: the sampler's histories forgotten and reset, the
// forward pass, the draws and the verifications into `result`. Throws what the runner or the
// sampler throws; `fail`: an injected step fault, thrown once the histories are reset.
void model_step(executor_state& st, step_request& req, bool fail, step_result& result) {
  st.sampler.begin_step();
  for (auto id : req.forget)
    st.sampler.forget(id);
  for (std::size_t i = 0; i < req.reset_ids.size(); ++i)
    st.sampler.reset(req.reset_ids[i], req.reset_tokens[i],
                     i < req.reset_rules.size() ? req.reset_rules[i] : runtime::logit_rules{});
  if (fail)
    throw runtime::injected_fault(runtime::fault_point::executor_step);
  // The step's tokens join the histories first: penalties on the device read them.
  auto t1 = clock::now();
  st.sampler.observe(req.batch, req.seq_ids);
  const double observe_us = micros_since(t1);
  // On the device the draw is a kernel of the step: forward_us includes it.
  const bool on_device = plan_device_sampling(st, req);
  const int vocab = st.runner->config().vocab_size;
  auto t0 = clock::now();
  if (on_device) {
    st.device_tokens.assign(st.device_rows.size(), -1);
    const bool any_logprobs = std::any_of(st.device_rows.begin(), st.device_rows.end(),
                                          [](const runtime::device_sample& d) { return d.logprobs >= 0; });
    st.device_logprobs.assign(any_logprobs ? st.device_rows.size() : 0, {});
    std::function<void()> before_draw;
    if (!st.pending_masks.empty())
      before_draw = [&st] { finish_constrained_rows(st); };
    st.runner->execute_sampled(req.batch, st.device_rows, st.device_tokens, st.device_logprobs, before_draw);
  } else {
    st.logits.resize(req.batch.logits_rows.size() * static_cast<std::size_t>(vocab));
    st.runner->execute(req.batch, st.logits);
  }
  result.forward_us = micros_since(t0);
  auto t2 = clock::now();
  if (on_device) {
    collect_device_step(st, req, result);
  } else {
    sample_step(st, req, vocab, result);
    auto t3 = clock::now();
    verify_step(st, req, vocab, result);
    result.verify_us = micros_since(t3);
  }
  result.sample_us = observe_us + micros_since(t2);
  result.constraint_us = st.sampler.constraint_us();
  result.failures = st.sampler.failures();
}

executor_actor::behavior_type executor_behavior(executor_actor::stateful_pointer<executor_state> self,
                                                std::shared_ptr<runtime::model_runner> runner,
                                                std::shared_ptr<runtime::fault_injector> faults,
                                                std::shared_ptr<runtime::structured::constraint_cache> constraints) {
  self->state.runner = std::move(runner);
  self->state.faults = std::move(faults);
  self->state.sampler.set_constraints(std::move(constraints));
  return {
      [self](run_step_atom, step_request& req) -> step_result {
        auto& st = self->state;
        // Outside the try: this one is not caught, the actor dies (CAF's exception handler), the engine restarts it.
        runtime::maybe_throw(st.faults.get(), runtime::fault_point::executor_crash);
        step_result result;
        result.step_id = req.batch.step_id;
        try {
          model_step(st, req, runtime::should_fail(st.faults.get(), runtime::fault_point::executor_step), result);
        } catch (const std::exception& e) {
          // The step is lost, the executor is not: the scheduler fails the step's requests.
          result.sampled.clear();
          result.error = e.what();
        }
        result.finished_ns = clock::now().time_since_epoch().count();
        return result;
      },
      [self](copy_atom, copy_request& req) -> caf::result<done_atom> {
        try {
          if (req.kind != runtime::kv_copy::device_to_device)
            runtime::maybe_throw(self->state.faults.get(), runtime::fault_point::swap_copy);
          self->state.runner->copy_blocks(req.kind, req.pairs);
        } catch (const std::exception& e) {
          return caf::make_error(caf::sec::runtime_error, std::string("block copy failed: ") + e.what());
        }
        return done_atom::value;
      },
  };
}

// ---------------------------------------------------------------------------
// A tensor-parallel group's leader: the executor above on rank 0's runner, which sends each
// step and block copy to ranks 1..N-1 (rank executors, actors/rank_executor.hpp), does its own
// part, and replies once every rank has answered. It waits for them with await, so nothing
// else reaches it while the group is inside a call.

struct leader_state : executor_state {
  std::vector<rank_executor_actor> followers; // ranks 1..N-1
  static inline const char* name = "executor";
};
using leader_pointer = executor_actor::stateful_pointer<leader_state>;

// One step or copy of the group in flight: each rank's answer, rank 0's own included; `then`
// runs when the last follower has answered (after the handler that asked: rank 0's part is done).
struct group_call {
  group_call(std::size_t ranks, std::function<void(group_call&)> then)
      : done(ranks), waiting(ranks - 1), then(std::move(then)) {}
  void answered() {
    if (--waiting == 0)
      then(*this);
  }
  std::vector<rank_done> done;
  caf::error lost; // a rank executor that stopped: the group goes down
  std::size_t waiting;
  std::function<void(group_call&)> then;
};

std::string rank_name(std::size_t rank, std::size_t ranks) {
  return "tensor-parallel rank " + std::to_string(rank) + " of " + std::to_string(ranks);
}

// A failed call's cause: the lowest rank that failed of itself, rather than because another
// aborted the group, and its error, naming it. Empty when every rank did its part.
std::string first_cause(const std::vector<rank_done>& done) {
  std::size_t cause = done.size();
  for (std::size_t r = 0; r < done.size(); ++r)
    if (!done[r].error.empty() && (cause == done.size() || (done[cause].aborted && !done[r].aborted)))
      cause = r;
  return cause == done.size() ? std::string() : done[cause].error + " (" + rank_name(cause, done.size()) + ")";
}

// send(follower, rank) makes the request of each follower; every answer is awaited, so nothing
// else reaches the leader while its group is inside the call.
template <class Send>
void ask_followers(leader_pointer self, const std::shared_ptr<group_call>& call, Send send) {
  const auto& followers = self->state.followers;
  const std::size_t ranks = followers.size() + 1;
  for (std::size_t rank = 1; rank < ranks; ++rank)
    send(followers[rank - 1], rank)
        .await(
            [call, rank](rank_done& d) {
              call->done[rank] = std::move(d);
              call->answered();
            },
            [call, rank, ranks](caf::error& e) {
              // What the rank died of (its exception handler's message), or why it could not be reached.
              const auto& context = e.context();
              const auto what = context.match_elements<std::string>() ? context.get_as<std::string>(0) : to_string(e);
              call->lost = caf::make_error(caf::sec::runtime_error, rank_name(rank, ranks) + " stopped: " + what);
              call->answered();
            });
}

// A rank that stopped: the step's or copy's requester hears it as if the executor had died, and
// the leader goes (its links end the other ranks), for the engine to restart the group.
void group_lost(leader_pointer self, const caf::error& lost, auto& rp) {
  rp.deliver(lost);
  self->quit(lost);
}

executor_actor::behavior_type leader_behavior(leader_pointer self, std::shared_ptr<runtime::model_runner> runner,
                                              std::vector<rank_executor_actor> followers,
                                              std::shared_ptr<runtime::fault_injector> faults,
                                              std::shared_ptr<runtime::structured::constraint_cache> constraints) {
  auto& st = self->state;
  st.runner = std::move(runner);
  st.followers = std::move(followers);
  st.faults = std::move(faults);
  st.sampler.set_constraints(std::move(constraints));
  // A rank executor that stops takes the group down, and the leader takes its followers with it.
  for (const auto& f : st.followers)
    self->link_to(f);
  // Dying here releases the followers that wait for rank 0 in a collective.
  self->set_exception_handler([self](std::exception_ptr& eptr) -> caf::error {
    self->state.runner->abort_group();
    std::string what = "an exception of unknown type";
    try {
      std::rethrow_exception(eptr);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    return caf::make_error(caf::sec::runtime_error,
                           rank_name(0, self->state.followers.size() + 1) + " stopped: " + what);
  });
  return {
      [self](run_step_atom, step_request& req) -> caf::result<step_result> {
        auto& st = self->state;
        const int ranks = static_cast<int>(st.followers.size()) + 1;
        const int crash = runtime::fault_rank(st.faults.get(), runtime::fault_point::executor_crash, ranks);
        const int fail = runtime::fault_rank(st.faults.get(), runtime::fault_point::executor_step, ranks);
        // Outside the try, before the other ranks have the step: the leader dies, and the group with it.
        if (crash == 0)
          throw runtime::injected_fault(runtime::fault_point::executor_crash);
        auto result = std::make_shared<step_result>();
        result->step_id = req.batch.step_id;
        auto rp = self->make_response_promise<step_result>();
        auto call = std::make_shared<group_call>(ranks, [self, result, rp](group_call& c) mutable {
          if (c.lost)
            return group_lost(self, c.lost, rp);
          if (auto cause = first_cause(c.done); !cause.empty()) {
            result->sampled.clear();
            result->error = std::move(cause);
            self->state.runner->reset_group(); // every rank has answered: none is inside a call
          }
          result->finished_ns = clock::now().time_since_epoch().count();
          rp.deliver(std::move(*result));
        });
        ask_followers(self, call, [&](const rank_executor_actor& f, std::size_t rank) {
          const auto r = static_cast<int>(rank);
          return self->request(f, caf::infinite, follow_atom::value, rank_step{req.batch, fail == r, crash == r});
        });
        try {
          model_step(st, req, fail == 0, *result);
        } catch (const runtime::collective_aborted& e) {
          call->done[0] = {e.what(), true};
        } catch (const std::exception& e) {
          st.runner->abort_group(); // the followers stop at their next collective instead of waiting for rank 0
          call->done[0] = {e.what(), false};
        }
        return rp;
      },
      [self](copy_atom, copy_request& req) -> caf::result<done_atom> {
        auto& st = self->state;
        // One use of the swap-copy fault per group copy, as one executor counts it; it fails the
        // copy before any rank copies.
        try {
          if (req.kind != runtime::kv_copy::device_to_device)
            runtime::maybe_throw(st.faults.get(), runtime::fault_point::swap_copy);
        } catch (const std::exception& e) {
          return caf::make_error(caf::sec::runtime_error, std::string("block copy failed: ") + e.what());
        }
        auto rp = self->make_response_promise<done_atom>();
        auto call = std::make_shared<group_call>(st.followers.size() + 1, [self, rp](group_call& c) mutable {
          if (c.lost)
            return group_lost(self, c.lost, rp);
          if (auto cause = first_cause(c.done); !cause.empty())
            rp.deliver(caf::make_error(caf::sec::runtime_error, "block copy failed: " + cause));
          else
            rp.deliver(done_atom::value);
        });
        ask_followers(self, call, [&](const rank_executor_actor& f, std::size_t) {
          return self->request(f, caf::infinite, copy_atom::value, req);
        });
        try {
          st.runner->copy_blocks(req.kind, req.pairs); // no collective: the followers copy meanwhile
        } catch (const std::exception& e) {
          call->done[0].error = e.what();
        }
        return rp;
      },
  };
}

} // namespace

executor_actor spawn_executor(caf::actor_system& sys, std::shared_ptr<runtime::model_runner> runner,
                              std::shared_ptr<runtime::fault_injector> faults,
                              std::shared_ptr<runtime::structured::constraint_cache> constraints) {
  return sys.spawn<caf::detached>(executor_behavior, std::move(runner), std::move(faults), std::move(constraints));
}

executor_actor spawn_executor_group(caf::actor_system& sys, std::vector<std::shared_ptr<runtime::model_runner>> ranks,
                                    std::shared_ptr<runtime::fault_injector> faults,
                                    std::shared_ptr<runtime::structured::constraint_cache> constraints) {
  if (ranks.size() < 2)
    throw std::invalid_argument("an executor group needs two or more ranks' runners, got " +
                                std::to_string(ranks.size()));
  std::vector<rank_executor_actor> followers;
  for (std::size_t r = 1; r < ranks.size(); ++r)
    followers.push_back(spawn_rank_executor(sys, static_cast<int>(r), ranks[r]));
  return sys.spawn<caf::detached>(leader_behavior, std::move(ranks[0]), std::move(followers), std::move(faults),
                                  std::move(constraints));
}

} // namespace troupe::actors
