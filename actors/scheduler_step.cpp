// One step of the scheduler actor, as a message sequence: propose to the draft
// (when sequences speculate), prepare round(s) with the KV cache (preempting
// when blocks are short), run_step on the executor, then the tokens out to the
// request actors. The decisions are plain runtime classes: scheduler_policy
// (who runs, who yields), speculation_planner (who drafts how much),
// step_builder (batch and rows), step_outcome (tokens, finishes, KV follow-up).
#include <algorithm>
#include <utility>

#include "actors/scheduler_state.hpp"

namespace troupe::actors::detail {

namespace {

using runtime::granted_work;
using runtime::preemption_mode;
using runtime::seq_status;

double micros(clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

// Sequences cancelled while the step ran leave once it is over.
void drop_aborted(scheduler_state& st) {
  for (auto id : st.aborted_while_busy)
    if (st.policy->contains(id))
      drop_sequence(st, id);
  st.aborted_while_busy.clear();
}

// A part of the engine failed under a step: every sequence fails (the clients
// hear it), their blocks go back with the next prepare, and the loop goes on.
void fail_everything(sched_pointer self, const std::string& why) {
  auto& st = self->state;
  std::vector<seq_id> ids;
  for (const auto& [id, t] : st.seqs)
    ids.push_back(id);
  for (auto id : ids)
    fail_sequence(st, id, "engine_error", why);
  st.aborted_while_busy.clear();
  st.busy = false;
  self->send(self, kick_atom::value);
}

// A sequence the cache does not know yet sends its tokens (prefix lookup); one that scores its
// prompt computes all of it, since a cached prefix would skip the rows that score it.
reserve_entry entry_for(const scheduler_state& st, seq_id id, int num_tokens) {
  const auto& s = st.policy->at(id);
  reserve_entry e{id, {}, s.num_computed, num_tokens, s.params.prompt_logprobs < 0};
  if (s.status == seq_status::waiting)
    e.tokens = s.tokens;
  return e;
}

void note_preempted(scheduler_state& st, seq_id id, preemption_mode mode) {
  st.policy->preempted(id, mode);
  st.stats.preempted(mode);
  auto& tracked = st.seqs.at(id);
  if (!tracked.preempted_at) { // preempted again before it resumed: the first time counts
    tracked.preempted_at = clock::now();
    tracked.preempted_by = mode;
  }
  if (mode == preemption_mode::recompute)
    tracked.needs_history_reset = true;
}

// A preempted sequence's first token since: how long the preemption cost it.
void note_resumed(scheduler_state& st, tracked_sequence& tracked) {
  if (!tracked.preempted_at)
    return;
  st.stats.resumed(tracked.preempted_by, micros(clock::now() - *tracked.preempted_at));
  tracked.preempted_at.reset();
}

// Tokens that joined a sequence go to its request actor; a finish ends it here.
void deliver(sched_pointer self, seq_id id, runtime::sequence_advance advance, sequence_tokens msg) {
  auto& st = self->state;
  msg.id = id;
  msg.ids = std::move(advance.tokens);
  msg.finish_reason = std::string(runtime::to_string(advance.finish));
  self->send(st.seqs.at(id).request, tokens_atom::value, std::move(msg));
  if (advance.finish != runtime::finish_reason::none) {
    if (counts_as_request(id))
      ++st.stats.counters().requests_finished;
    drop_sequence(st, id);
  }
}

// One sequence's share of a successful step; row: its first logits row.
void advance_sequence(sched_pointer self, const granted_work& w, std::size_t row, std::size_t verify_index,
                      step_result& result) {
  auto& st = self->state;
  auto& tracked = st.seqs.at(w.id);
  const bool aborted = st.aborted_while_busy.contains(w.id);
  if (w.samples || w.drafted > 0)
    note_resumed(st, tracked);
  sequence_tokens msg;
  msg.sampled_ns = result.finished_ns;
  if (w.drafted > 0) {
    const auto& emitted = result.verified.at(verify_index);
    const int accepted = static_cast<int>(emitted.size()) - 1;
    st.outcome->verified_computed(w, emitted);
    st.stats.verified(w.drafted, accepted);
    st.speculation->observe(w.id, w.drafted, accepted);
    if (!aborted)
      deliver(self, w.id, st.outcome->verified(w, emitted, tracked.stop_ids), std::move(msg));
    return;
  }
  st.outcome->computed(w);
  for (int i = 0; i < w.prompt_rows; ++i, ++row) {
    tracked.prompt_logprobs.push_back(std::move(result.logprobs.at(row)));
    ++tracked.prompt_scored;
  }
  if (aborted)
    return;
  fork_if_ready(st, w.id); // its prompt's last token is left: every choice computes it and samples
  if (!w.samples)
    return;
  if (st.policy->at(w.id).params.logprobs >= 0)
    msg.logprobs.push_back(std::move(result.logprobs.at(row)));
  if (!tracked.admitted_once) {
    tracked.admitted_once = true;
    msg.cached_tokens = tracked.cached_tokens;
    msg.first_scheduled_ns = tracked.first_scheduled_ns;
    msg.prompt_logprobs = std::move(tracked.prompt_logprobs);
  }
  deliver(self, w.id, st.outcome->sampled(w, result.sampled.at(row), tracked.stop_ids), std::move(msg));
}

void finish_step(sched_pointer self, std::vector<granted_work> work, step_result result) {
  auto& st = self->state;
  const bool ok = result.error.empty();
  if (!ok)
    ++st.stats.counters().step_failures;
  std::size_t next_row = 0, next_verify = 0;
  int decodes = 0, prefill_tokens = 0;
  std::uint64_t drafted = 0;
  for (const auto& w : work) {
    const std::size_t row = next_row, verify_index = next_verify;
    next_row += static_cast<std::size_t>(w.prompt_rows) + (w.samples ? 1 : 0);
    next_verify += w.drafted > 0 ? 1 : 0;
    drafted += static_cast<std::uint64_t>(w.drafted);
    if (!st.policy->contains(w.id))
      continue;
    if (st.outcome->is_decode(w))
      ++decodes;
    else
      prefill_tokens += w.end - w.start;
    const auto failure = std::find_if(result.failures.begin(), result.failures.end(),
                                      [&](const runtime::sequence_failure& f) { return f.id == w.id; });
    if (ok && failure != result.failures.end()) {
      if (!st.aborted_while_busy.contains(w.id))
        fail_sequence(st, w.id, "invalid_request", failure->message);
    } else if (ok) {
      advance_sequence(self, w, row, verify_index, result);
    } else if (!st.aborted_while_busy.contains(w.id))
      fail_sequence(st, w.id, "step_failed", "the model step failed: " + result.error);
  }
  drop_aborted(st);
  const double wall_us = micros(clock::now() - st.step_start);
  st.stats.step_finished(result, decodes, prefill_tokens, wall_us, st.step_draft_us);
  if (st.speculation && ok) // a lost step's time says nothing about what speculation costs
    st.speculation->learn(wall_us, st.step_draft_us, prefill_tokens == 0, drafted, result.verified.size());
  st.step_draft_us = 0;
  st.busy = false;
  st.back_to_back_since = clock::now();
  self->send(self, kick_atom::value); // next step, after whatever arrived meanwhile
}

// The executor died under a step (the engine restarts it on the same runner, and
// says so with restart_atom). The step's sequences fail, since their KV may be
// half written; the others keep their blocks and go on with the new executor.
void executor_lost(sched_pointer self, const std::vector<granted_work>& work, const executor_actor& used,
                   const caf::error& err) {
  auto& st = self->state;
  ++st.stats.counters().step_failures;
  for (const auto& w : work)
    if (st.policy->contains(w.id) && !st.aborted_while_busy.contains(w.id))
      fail_sequence(st, w.id, "step_failed",
                    "the executor stopped during the model step (" + to_string(err) +
                        "); it is restarted and serves the other requests");
  drop_aborted(st);
  forget_sampler_histories(st);
  st.step_draft_us = 0;
  if (st.executor == used) // else the restart came first
    st.waiting_for_executor = true;
  st.busy = false;
  st.back_to_back_since.reset();
  self->send(self, kick_atom::value);
}

void run_step(sched_pointer self, std::vector<granted_work> work) {
  auto& st = self->state;
  if (work.empty()) {
    drop_aborted(st);
    st.busy = false;
    // A step that only released blocks may have had sequences arrive meanwhile: they
    // need a step. (A step whose planned work was all refused waits for a change instead.)
    if (!st.pending_release.empty() || (st.plan_was_empty && !st.policy->idle()))
      self->send(self, kick_atom::value);
    return;
  }
  runtime::step_builder builder(st.settings.block_size, runtime::max_blocks_of(work));
  for (auto& w : work) {
    const auto& s = st.policy->at(w.id);
    auto& tracked = st.seqs.at(w.id);
    if (std::exchange(tracked.needs_history_reset, false))
      builder.reset_history(w, s, tracked.logit_rules);
    if (auto p = st.proposals.find(w.id); p != st.proposals.end())
      builder.add_speculation(w, s, p->second.tokens, std::move(p->second.probs));
    else
      builder.add(w, s, tracked.prompt_scored);
  }
  st.proposals.clear();
  auto built = builder.take(st.step_id++);
  step_request req{std::move(built.batch),
                   std::move(built.verify),
                   std::move(built.seq_ids),
                   std::move(built.rows),
                   std::exchange(st.pending_forget, {}),
                   std::move(built.reset_ids),
                   std::move(built.reset_tokens),
                   std::move(built.reset_rules)};
  // The step's work is kept by the handlers: whichever runs gets it (they share one copy).
  auto shared_work = std::make_shared<std::vector<granted_work>>(std::move(work));
  self->request(st.executor, caf::infinite, run_step_atom::value, std::move(req))
      .then([self, shared_work](step_result& result) { finish_step(self, std::move(*shared_work), std::move(result)); },
            [self, shared_work, used = st.executor](caf::error& err) { executor_lost(self, *shared_work, used, err); });
}

// What the KV cache did with a prepare: preemptions and swaps reach the policy.
void absorb(scheduler_state& st, const kv_prepared& r, const std::vector<seq_id>& recompute) {
  for (auto id : r.swapped_out)
    note_preempted(st, id, preemption_mode::swap);
  for (auto id : r.swap_fell_back) {
    note_preempted(st, id, preemption_mode::recompute);
    st.stats.swap_fell_back();
  }
  for (auto id : recompute)
    note_preempted(st, id, preemption_mode::recompute);
  for (auto id : r.swap_in_failed) // swapped, and now its host copy is lost: recompute
    note_preempted(st, id, preemption_mode::recompute);
  for (auto id : r.swapped_in)
    st.policy->swapped_in(id);
  st.stats.prepared(r);
}

// One prepare round; on shortage, preempts victims and goes round again.
void prepare_round(sched_pointer self, kv_prepare prep, std::vector<granted_work> work) {
  auto& st = self->state;
  auto recompute = prep.recompute;
  auto reserve = prep.reserve;
  self->request(st.kv, caf::infinite, prepare_atom::value, std::move(prep))
      .then(
          [self, recompute, reserve, work = std::move(work)](kv_prepared& r) mutable {
            auto& st = self->state;
            absorb(st, r, recompute);
            auto refused_swap_in = [&](seq_id id) {
              return std::ranges::find(r.swap_in_refused, id) != r.swap_in_refused.end() ||
                     std::ranges::find(r.swap_in_failed, id) != r.swap_in_failed.end();
            };
            std::vector<seq_id> starving;
            for (auto& g : r.grants) {
              if (!g.granted) {
                if (!refused_swap_in(g.id)) // a refused swap-in waits; a refused reservation starves
                  starving.push_back(g.id);
                continue;
              }
              if (st.policy->at(g.id).status == seq_status::waiting) {
                st.policy->admitted(g.id, g.start);
                auto& tracked = st.seqs.at(g.id);
                if (tracked.cached_tokens < 0) {
                  tracked.cached_tokens = g.start;
                  tracked.first_scheduled_ns = st.step_start.time_since_epoch().count();
                }
              }
              work.push_back({g.id, g.start, g.end, std::move(g.block_table)});
            }
            // Blocks are short: the least urgent running sequence yields (maybe the starving one itself).
            const auto shortage = st.policy->plan_for_shortage(starving, !work.empty() || st.policy->num_running() > 0);
            for (auto id : shortage.never_fits)
              fail_sequence(st, id, "prompt_too_long",
                            "the sequence needs more KV-cache blocks than the engine has (" +
                                std::to_string(r.device_blocks_total) + " blocks of " +
                                std::to_string(st.settings.block_size) + " tokens)");
            if (shortage.preempt.empty()) {
              run_step(self, std::move(work));
              return;
            }
            kv_prepare next;
            const bool swap = st.policy->config().preemption == preemption_mode::swap;
            for (auto victim : shortage.preempt) {
              (swap ? next.swap_out : next.recompute).push_back(victim);
              std::erase_if(work, [&](const granted_work& w) { return w.id == victim; });
            }
            for (auto id : shortage.retry)
              for (const auto& e : reserve)
                if (e.id == id)
                  next.reserve.push_back(entry_for(st, id, e.num_tokens));
            next.release = std::exchange(st.pending_release, {});
            prepare_round(self, std::move(next), std::move(work));
          },
          [self](caf::error& err) { fail_everything(self, "the KV cache failed: " + to_string(err)); });
}

void prepare_plan(sched_pointer self, const runtime::step_plan& plan) {
  auto& st = self->state;
  kv_prepare prep;
  prep.release = std::exchange(st.pending_release, {});
  prep.followup = st.outcome->take_followup();
  for (auto id : plan.preempt)
    (st.policy->config().preemption == preemption_mode::swap ? prep.swap_out : prep.recompute).push_back(id);
  prep.swap_in = plan.swap_in;
  for (const auto& w : plan.work) {
    prep.reserve.push_back(entry_for(st, w.id, w.num_tokens));
    if (auto p = st.proposals.find(w.id); p != st.proposals.end())
      prep.reserve.back().num_tokens += static_cast<int>(p->second.tokens.size()); // slots for the drafts
  }
  prepare_round(self, std::move(prep), {});
}

// Decode-phase sequences that speculate this step, and how far.
draft_request speculation_for(scheduler_state& st, const runtime::step_plan& plan) {
  draft_request out;
  if (!st.speculation)
    return out;
  for (const auto& w : plan.work) {
    const auto& s = st.policy->at(w.id);
    if (int k = st.speculation->k_for(s, w.num_tokens, st.settings.max_model_len); k > 0)
      out.seqs.push_back({w.id, s.tokens, k, s.params, s.seed, static_cast<std::uint64_t>(s.num_output()), s.prompt_len,
                          s.params.seed.has_value()});
  }
  return out;
}

} // namespace

void start_step(sched_pointer self) {
  auto& st = self->state;
  if (st.busy || st.waiting_for_executor)
    return;
  if (st.policy->idle() && st.pending_release.empty()) {
    st.back_to_back_since.reset(); // idle time is not host overhead
    return;
  }
  st.busy = true;
  st.step_start = clock::now();
  st.stats.step_started(st.step_start, std::exchange(st.back_to_back_since, std::nullopt));
  auto plan = st.policy->plan();
  st.plan_was_empty = plan.empty();
  auto drafts = speculation_for(st, plan);
  if (drafts.seqs.empty()) {
    if (st.draft && !st.pending_draft_forget.empty())
      caf::anon_send(st.draft, propose_atom::value, draft_request{{}, std::exchange(st.pending_draft_forget, {})});
    prepare_plan(self, plan);
    return;
  }
  drafts.forget = std::exchange(st.pending_draft_forget, {});
  // On failure these go to the draft again: the ended ones' state may not have been released, and
  // the drafting ones' state may be half updated. (A forget of what the draft does not hold is nothing.)
  std::vector<seq_id> drafting = drafts.forget;
  for (const auto& e : drafts.seqs)
    drafting.push_back(e.id);
  self->request(st.draft, caf::infinite, propose_atom::value, std::move(drafts))
      .then(
          [self, plan](draft_reply& r) {
            self->state.step_draft_us = r.draft_us;
            for (auto& p : r.proposals)
              if (!p.tokens.empty())
                self->state.proposals[p.id] = std::move(p);
            prepare_plan(self, plan);
          },
          // A failed draft costs the step its speculation, nothing else.
          [self, plan, drafting = std::move(drafting)](caf::error&) {
            auto& st = self->state;
            ++st.stats.counters().draft_failures;
            st.pending_draft_forget.insert(st.pending_draft_forget.end(), drafting.begin(), drafting.end());
            prepare_plan(self, plan);
          });
}

} // namespace troupe::actors::detail
