// The scheduler actor's face: sequences arrive (enqueue, after a prefix peek),
// leave (abort, finish, failure), parts of the engine are restarted under it,
// and stats are read. Each arrival or finished step kicks the step loop, whose
// one step is scheduler_step.cpp.
#include "actors/scheduler.hpp"

#include "actors/scheduler_state.hpp"

namespace troupe::actors {

namespace detail {

void drop_sequence(scheduler_state& st, seq_id id) {
  st.policy->remove(id);
  st.seqs.erase(id);
  st.pending_release.push_back(id);
  st.pending_forget.push_back(id);
  if (st.speculation) {
    st.speculation->remove(id);
    st.pending_draft_forget.push_back(id);
  }
}

void fail_sequence(scheduler_state& st, seq_id id, std::string code, std::string message) {
  if (auto it = st.seqs.find(id); it != st.seqs.end())
    caf::anon_send(it->second.request, failed{0, std::move(code), std::move(message)});
  if (counts_as_request(id))
    ++st.stats.counters().requests_failed;
  drop_sequence(st, id);
}

void forget_sampler_histories(scheduler_state& st) {
  for (auto& [id, tracked] : st.seqs)
    tracked.needs_history_reset = true;
}

void fork_if_ready(scheduler_state& st, seq_id id) {
  if (!st.policy->ready_to_fork(id))
    return;
  const auto children = st.policy->fork_choices(id);
  const auto& parent = st.seqs.at(id);
  for (auto child : children) {
    auto& tracked = st.seqs[child];
    tracked.request = parent.request;
    tracked.num_speculative_tokens = parent.num_speculative_tokens;
    tracked.stop_ids = parent.stop_ids;
    tracked.logit_rules = parent.logit_rules;
    tracked.cached_tokens = parent.cached_tokens;
    tracked.first_scheduled_ns = parent.first_scheduled_ns;
    tracked.prompt_logprobs = parent.prompt_logprobs; // every choice's first message carries the prompt's
    if (st.speculation)
      st.speculation->add(child, parent.num_speculative_tokens);
  }
  // A parent still waiting (a one-token prompt) has no blocks: its choices start from nothing, as it does.
  if (st.policy->at(id).status != runtime::seq_status::waiting)
    st.outcome->forked(id, children);
}

namespace {

// A new sequence joins the policy (after its prefix peek, if any), unless it was aborted meanwhile.
void admit(sched_pointer self, runtime::sequence s) {
  auto& st = self->state;
  if (!st.seqs.contains(s.id))
    return;
  const auto id = s.id;
  st.policy->add(std::move(s));
  fork_if_ready(st, id); // a one-token prompt: nothing to share, every choice computes it
  start_step(self);
}

void enqueue(sched_pointer self, sequence_spec& spec, request_actor& request) {
  auto& st = self->state;
  runtime::sequence s;
  s.id = spec.id;
  s.priority = spec.priority;
  s.arrival = spec.id;
  s.tokens = std::move(spec.prompt_ids);
  s.prompt_len = static_cast<int>(s.tokens.size());
  s.params = std::move(spec.params);
  s.seed = spec.seed;
  s.choices = s.params.choices();
  auto& tracked = st.seqs[spec.id];
  tracked.request = std::move(request);
  tracked.num_speculative_tokens = spec.num_speculative_tokens;
  tracked.stop_ids = std::move(spec.stop_ids);
  tracked.logit_rules = runtime::logit_rules_for(s.params, tracked.stop_ids);
  if (st.speculation)
    st.speculation->add(spec.id, spec.num_speculative_tokens);
  if (!st.settings.enable_prefix_caching || s.params.prompt_logprobs >= 0) {
    admit(self, std::move(s));
    return;
  }
  // The sequence waits for the peek before the policy sees it, so that its first step is budgeted by
  // the tokens it computes (a shared system prompt would otherwise take the budget of several prompts).
  auto tokens = s.tokens;
  self->request(st.kv, caf::infinite, peek_prefix_atom::value, std::move(tokens))
      .then(
          [self, s](int cached) mutable {
            s.cached_hint = cached;
            admit(self, std::move(s));
          },
          [self, s](caf::error&) mutable { admit(self, std::move(s)); }); // no hint: budget it all
}

// Cancel, stop string, client gone: the blocks come back with the next prepare.
void abort_sequence(sched_pointer self, seq_id id) {
  auto& st = self->state;
  if (!st.seqs.contains(id))
    return;
  if (counts_as_request(id))
    ++st.stats.counters().requests_aborted;
  if (!st.policy->contains(id)) { // its prefix peek is in flight: nothing was planned or reserved yet
    st.seqs.erase(id);
    if (st.speculation)
      st.speculation->remove(id);
    return;
  }
  if (st.busy) {
    st.aborted_while_busy.insert(id);
  } else {
    drop_sequence(st, id);
    start_step(self);
  }
}

scheduler_actor::behavior_type scheduler_behavior(sched_pointer self, scheduler_settings settings, kv_cache_actor kv,
                                                  executor_actor executor, draft_actor draft) {
  auto& st = self->state;
  st.policy = std::make_unique<runtime::scheduler_policy>(settings.policy);
  st.outcome = std::make_unique<runtime::step_outcome>(
      *st.policy,
      runtime::outcome_settings{settings.block_size, settings.enable_prefix_caching, settings.max_model_len});
  if (draft)
    st.speculation.emplace(
        runtime::speculation_settings{settings.num_speculative_tokens, settings.adaptive_speculation});
  st.settings = settings;
  st.kv = std::move(kv);
  st.executor = std::move(executor);
  st.draft = std::move(draft);
  return {
      [self](enqueue_atom, sequence_spec& spec, request_actor& request) { enqueue(self, spec, request); },
      [self](abort_atom, seq_id id) { abort_sequence(self, id); },
      [self](kick_atom) { start_step(self); },
      [self](restart_atom, executor_actor& executor) {
        auto& st = self->state;
        ++st.stats.counters().executor_restarts;
        st.executor = executor;
        // Sent before any later prepare (two actors' messages keep their order): copies go to the new one too.
        self->send(st.kv, restart_atom::value, std::move(executor));
        forget_sampler_histories(st);
        st.waiting_for_executor = false;
        start_step(self);
      },
      [self](restart_atom, draft_actor& draft) {
        auto& st = self->state;
        ++st.stats.counters().draft_restarts;
        st.draft = std::move(draft);
        // The restarted draft reset its proposer: every sequence starts its drafts afresh, nothing to forget.
        st.pending_draft_forget.clear();
      },
      [self](stats_atom) -> engine_stats { return self->state.stats.snapshot(*self->state.policy); },
  };
}

} // namespace
} // namespace detail

scheduler_actor spawn_scheduler(caf::actor_system& sys, scheduler_settings settings, kv_cache_actor kv,
                                executor_actor executor, draft_actor draft) {
  return sys.spawn(detail::scheduler_behavior, settings, std::move(kv), std::move(executor), std::move(draft));
}

} // namespace troupe::actors
