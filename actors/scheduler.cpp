// The step loop. One step = prepare round(s) with the KV cache, one run_step on
// the executor, one fan-out. Messages on the hot path per step are constant:
// prepare + run_step (a second prepare only when blocks were short).
#include "actors/scheduler.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "runtime/speculation_cost.hpp"
#include "runtime/step_batch_builder.hpp"

namespace troupe::actors {

namespace {

using clock = std::chrono::steady_clock;
using runtime::preemption_mode;
using runtime::seq_status;

struct tracked_sequence {
  request_actor request;
  std::vector<token_id> stop_ids;
  bool admitted_once = false;      // its first token has been sent
  int cached_tokens = -1;          // prompt tokens the prefix cache had at first admission
  bool needs_history_reset = true; // the executor's sampler must learn its cached tokens
  std::int64_t first_scheduled_ns = 0;
  // Prompt logprobs (params.prompt_logprobs >= 0): collected chunk by chunk, sent
  // with the first token. prompt_scored = the next prompt token to score (token 0 has none).
  int prompt_scored = 1;
  std::vector<runtime::token_logprobs> prompt_logprobs;
  int max_speculative_tokens = 0;                 // this sequence's cap (the engine's, or its request's override)
  std::optional<runtime::adaptive_k> speculation; // its k, from its own acceptance
  // Set while preempted: when, and how; cleared by its next token (engine_stats' resume times).
  std::optional<std::chrono::steady_clock::time_point> preempted_at;
  preemption_mode preempted_by = preemption_mode::swap;
};

struct granted_work {
  seq_id id;
  int start, end;
  std::vector<std::int32_t> table;
  int prompt_rows = 0;  // logits rows of this step that score prompt tokens (before the sampled row)
  bool samples = false; // the step samples this sequence's next token (its last row)
  int drafted = 0;      // > 0: the step verifies this many draft tokens (no rows entry; a verify entry)
};

struct scheduler_state {
  std::unique_ptr<runtime::scheduler_policy> policy;
  scheduler_settings settings;
  kv_cache_actor kv;
  executor_actor executor;
  draft_actor draft;
  std::unordered_map<seq_id, draft_proposal> proposals; // this step's drafts, by sequence
  std::vector<seq_id> pending_draft_forget;
  double step_draft_us = 0; // the draft's proposer time in this step
  // What a draft token costs relative to a target step, learned from the steps
  // that speculated (EWMA); every sequence's adaptive k plans with it.
  double draft_cost = 0.1; // the draft's own time only: the estimate until speculation_cost has both kinds
  runtime::speculation_cost speculation_cost;
  std::unordered_map<seq_id, tracked_sequence> seqs;
  std::vector<seq_id> pending_release, pending_forget;
  kv_prepare pending_computed; // only the computed_* fields are used
  std::unordered_set<seq_id> aborted_while_busy;
  bool busy = false;
  // The executor died under a step and the engine's restart has not arrived yet: no steps until it does.
  bool waiting_for_executor = false;
  bool plan_was_empty = false; // the step in progress had nothing to compute, only blocks to release
  std::uint64_t step_id = 0;
  clock::time_point step_start;
  // The previous step's end, while steps follow one another with no idle time between:
  // the gap to the next step's start is host time the device sits idle.
  std::optional<clock::time_point> back_to_back_since;
  engine_stats stats;
  static inline const char* name = "scheduler";
};

using sched_pointer = scheduler_actor::stateful_pointer<scheduler_state>;

void start_step(sched_pointer self);

// Ends a sequence on the scheduler's side: its blocks go back with the next prepare.
void drop_sequence(scheduler_state& st, seq_id id) {
  st.policy->remove(id);
  st.seqs.erase(id);
  st.pending_release.push_back(id);
  st.pending_forget.push_back(id);
  if (st.draft)
    st.pending_draft_forget.push_back(id);
}

void fail_sequence(scheduler_state& st, seq_id id, std::string code, std::string message) {
  auto it = st.seqs.find(id);
  if (it != st.seqs.end())
    caf::anon_send(it->second.request, failed{0, std::move(code), std::move(message)});
  ++st.stats.requests_failed;
  drop_sequence(st, id);
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

// Reserve entries for work items: a sequence the cache does not know yet sends its tokens.
reserve_entry entry_for(const scheduler_state& st, const runtime::scheduled_work& w) {
  const auto& s = st.policy->at(w.id);
  reserve_entry e{w.id, {}, s.num_computed, w.num_tokens, true};
  if (s.status == seq_status::waiting)
    e.tokens = s.tokens;
  // A cached prefix would skip the rows that score its tokens.
  e.lookup_prefix = s.params.prompt_logprobs < 0;
  return e;
}

// A verified speculation: the last token and the accepted drafts now have K/V;
// the accepted drafts and the corrected (or bonus) token join the sequence, cut
// at a stop id or the length limit like any sampled token.
void finish_speculation(sched_pointer self, const granted_work& w, const std::vector<token_id>& emitted,
                        std::int64_t finished_ns) {
  auto& st = self->state;
  auto& s = st.policy->at(w.id);
  auto& tracked = st.seqs.at(w.id);
  const int accepted = static_cast<int>(emitted.size()) - 1;
  const int computed = static_cast<int>(s.tokens.size()) + accepted;
  st.policy->computed(w.id, computed);
  st.stats.spec_drafted += static_cast<std::uint64_t>(w.drafted);
  st.stats.spec_accepted += static_cast<std::uint64_t>(accepted);
  ++st.stats.spec_verifications;
  if (tracked.speculation)
    tracked.speculation->observe(w.drafted, accepted);
  if (st.aborted_while_busy.contains(w.id))
    return;
  sequence_tokens msg{w.id, {}, {}, 0};
  msg.sampled_ns = finished_ns;
  for (auto t : emitted) {
    st.policy->append_token(w.id, t);
    msg.ids.push_back(t);
    if (std::find(tracked.stop_ids.begin(), tracked.stop_ids.end(), t) != tracked.stop_ids.end())
      msg.finish_reason = "stop";
    else if (s.num_output() >= s.params.max_tokens || static_cast<int>(s.tokens.size()) >= st.settings.max_model_len)
      msg.finish_reason = "length";
    if (!msg.finish_reason.empty())
      break;
  }
  // The rejected drafts' slots go back with the next prepare (kv_cache trims the table).
  st.pending_computed.trim_ids.push_back(w.id);
  st.pending_computed.trim_tokens.push_back(static_cast<int>(s.tokens.size()));
  if (st.settings.enable_prefix_caching && computed / st.settings.block_size > w.start / st.settings.block_size) {
    st.pending_computed.computed_ids.push_back(w.id);
    st.pending_computed.computed_tokens.emplace_back(s.tokens.begin(), s.tokens.begin() + computed);
    st.pending_computed.computed_counts.push_back(computed);
  }
  const bool finished_now = !msg.finish_reason.empty();
  self->send(tracked.request, tokens_atom::value, std::move(msg));
  if (finished_now) {
    ++st.stats.requests_finished;
    drop_sequence(st, w.id);
  }
}

// What a finished step teaches about speculation: decode-only steps, with drafts
// against without, give its measured cost; the draft's own time per token is
// the estimate until both kinds were seen. Speculating steps' timings go to the stats.
void learn_from_speculation(scheduler_state& st, const std::vector<granted_work>& work, const step_result& result,
                            double wall_us, bool decode_only) {
  if (!st.draft)
    return;
  const bool speculated = !result.verified.empty();
  std::uint64_t drafted = 0;
  for (const auto& w : work)
    drafted += static_cast<std::uint64_t>(w.drafted);
  if (decode_only) {
    if (speculated)
      st.speculation_cost.observe_speculative(
          wall_us, static_cast<double>(drafted) / static_cast<double>(result.verified.size()));
    else
      st.speculation_cost.observe_plain(wall_us);
  }
  if (!speculated)
    return;
  if (drafted > 0) {
    const double target_us = std::max(1.0, wall_us - st.step_draft_us);
    st.draft_cost = 0.8 * st.draft_cost + 0.2 * (st.step_draft_us / static_cast<double>(drafted)) / target_us;
  }
  if (st.stats.verify_us.size() < 100000) {
    st.stats.draft_us.push_back(st.step_draft_us);
    st.stats.verify_us.push_back(result.verify_us);
  }
}

// A new sequence back from its prefix peek joins the policy, unless it was aborted meanwhile.
void add_peeked(sched_pointer self, runtime::sequence s) {
  auto& st = self->state;
  if (!st.seqs.contains(s.id))
    return;
  st.policy->add(std::move(s));
  start_step(self);
}

void note_preempted(scheduler_state& st, seq_id id, preemption_mode mode) {
  st.policy->preempted(id, mode);
  auto& tracked = st.seqs.at(id);
  if (!tracked.preempted_at) { // preempted again before it resumed: the first time counts
    tracked.preempted_at = clock::now();
    tracked.preempted_by = mode;
  }
  if (mode == preemption_mode::swap) {
    ++st.stats.preemptions_swap;
  } else {
    tracked.needs_history_reset = true;
    ++st.stats.preemptions_recompute;
  }
}

// A preempted sequence's first token since: how long the preemption cost it (swap: waiting
// for room and the copy back; recompute: waiting and the prompt's prefill again).
void note_resumed(scheduler_state& st, tracked_sequence& tracked) {
  if (!tracked.preempted_at)
    return;
  const double us = std::chrono::duration<double, std::micro>(clock::now() - *tracked.preempted_at).count();
  auto& samples = tracked.preempted_by == preemption_mode::swap ? st.stats.resume_swap_us : st.stats.resume_recompute_us;
  if (samples.size() < engine_stats::max_samples)
    samples.push_back(us);
  tracked.preempted_at.reset();
}

void finish_step(sched_pointer self, std::vector<granted_work> work, step_result result) {
  auto& st = self->state;
  const bool ok = result.error.empty();
  if (!ok)
    ++st.stats.step_failures;
  std::size_t next_row = 0, next_verify = 0;
  int decodes = 0, prefill_tokens = 0;
  for (const auto& w : work) {
    std::size_t row = next_row; // this sequence's rows: its prompt rows, then the sampled one
    next_row += static_cast<std::size_t>(w.prompt_rows) + (w.samples ? 1 : 0);
    const std::size_t verify_index = next_verify;
    next_verify += w.drafted > 0 ? 1 : 0;
    if (!st.policy->contains(w.id))
      continue;
    auto& s = st.policy->at(w.id);
    const bool sampled = w.samples;
    if ((w.end - w.start == 1 && sampled && s.num_output() > 0) || w.drafted > 0)
      ++decodes;
    else
      prefill_tokens += w.end - w.start;
    if (!ok) {
      if (!st.aborted_while_busy.contains(w.id))
        fail_sequence(st, w.id, "step_failed", "the model step failed: " + result.error);
      continue;
    }
    if (sampled || w.drafted > 0)
      note_resumed(st, st.seqs.at(w.id));
    if (w.drafted > 0) {
      finish_speculation(self, w, result.verified.at(verify_index), result.finished_ns);
      continue;
    }
    st.policy->computed(w.id, w.end);
    if (st.settings.enable_prefix_caching && w.end / st.settings.block_size > w.start / st.settings.block_size) {
      st.pending_computed.computed_ids.push_back(w.id);
      st.pending_computed.computed_tokens.emplace_back(s.tokens.begin(), s.tokens.begin() + w.end);
      st.pending_computed.computed_counts.push_back(w.end);
    }
    auto& tracked = st.seqs.at(w.id);
    for (int i = 0; i < w.prompt_rows; ++i, ++row) {
      tracked.prompt_logprobs.push_back(result.logprobs.at(row));
      ++tracked.prompt_scored;
    }
    if (!sampled)
      continue;
    const std::size_t sampled_row = row;
    token_id next = result.sampled[sampled_row];
    if (st.aborted_while_busy.contains(w.id))
      continue;
    st.policy->append_token(w.id, next);
    sequence_tokens msg{w.id, {next}, {}, 0};
    msg.sampled_ns = result.finished_ns;
    if (s.params.logprobs >= 0)
      msg.logprobs.push_back(result.logprobs.at(sampled_row));
    if (!tracked.admitted_once) {
      tracked.admitted_once = true;
      msg.cached_tokens = tracked.cached_tokens;
      msg.first_scheduled_ns = tracked.first_scheduled_ns;
      msg.prompt_logprobs = std::move(tracked.prompt_logprobs);
    }
    if (std::find(tracked.stop_ids.begin(), tracked.stop_ids.end(), next) != tracked.stop_ids.end())
      msg.finish_reason = "stop";
    else if (s.num_output() >= s.params.max_tokens || static_cast<int>(s.tokens.size()) >= st.settings.max_model_len)
      msg.finish_reason = "length";
    const bool finished_now = !msg.finish_reason.empty();
    self->send(tracked.request, tokens_atom::value, std::move(msg));
    if (finished_now) {
      ++st.stats.requests_finished;
      drop_sequence(st, w.id);
    }
  }
  for (auto id : st.aborted_while_busy)
    if (st.policy->contains(id))
      drop_sequence(st, id);
  st.aborted_while_busy.clear();

  auto& stats = st.stats;
  ++stats.steps;
  stats.decode_tokens += decodes;
  stats.prefill_tokens += prefill_tokens;
  stats.last_step_decodes = decodes;
  stats.last_step_prefill_tokens = prefill_tokens;
  if (prefill_tokens > 0 && stats.decodes_in_prefill_steps.size() < 100000)
    stats.decodes_in_prefill_steps.push_back(decodes);
  double wall_us = std::chrono::duration<double, std::micro>(clock::now() - st.step_start).count();
  if (stats.host_overhead_us.size() < engine_stats::max_samples) {
    stats.host_overhead_us.push_back(std::max(0.0, wall_us - result.forward_us - result.sample_us - st.step_draft_us));
    stats.step_device_us.push_back(result.forward_us);
    stats.step_host_us.push_back(std::max(0.0, wall_us - result.forward_us - st.step_draft_us));
  }
  if (ok) // a lost step's time says nothing about what speculation costs
    learn_from_speculation(st, work, result, wall_us, prefill_tokens == 0);
  st.step_draft_us = 0;
  st.busy = false;
  st.back_to_back_since = clock::now();
  self->send(self, kick_atom::value); // next step, after whatever arrived meanwhile
}

// Every sequence's sampling history must be sent again: the executor that knew them is gone.
void forget_sampler_histories(scheduler_state& st) {
  for (auto& [id, tracked] : st.seqs)
    tracked.needs_history_reset = true;
}

// The executor died under a step (the engine restarts it on the same runner, and
// says so with restart_atom). The step's sequences fail, since their KV may be
// half written; the others keep their blocks and go on with the new executor.
void executor_lost(sched_pointer self, const std::vector<granted_work>& work, const executor_actor& used,
                   const caf::error& err) {
  auto& st = self->state;
  ++st.stats.step_failures;
  for (const auto& w : work)
    if (st.policy->contains(w.id) && !st.aborted_while_busy.contains(w.id))
      fail_sequence(st, w.id, "step_failed",
                    "the executor stopped during the model step (" + to_string(err) +
                        "); it is restarted and serves the other requests");
  for (auto id : st.aborted_while_busy)
    if (st.policy->contains(id))
      drop_sequence(st, id);
  st.aborted_while_busy.clear();
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
    for (auto id : st.aborted_while_busy)
      if (st.policy->contains(id))
        drop_sequence(st, id);
    st.aborted_while_busy.clear();
    st.busy = false;
    // A step that only released blocks may have had sequences arrive meanwhile: they
    // need a step. (A step whose planned work was all refused waits for a change instead.)
    if (!st.pending_release.empty() || (st.plan_was_empty && !st.policy->idle()))
      self->send(self, kick_atom::value);
    return;
  }
  int max_blocks = 0;
  for (const auto& w : work)
    max_blocks = std::max<int>(max_blocks, static_cast<int>(w.table.size()));
  runtime::step_batch_builder builder(st.settings.block_size, max_blocks);
  step_request req;
  std::int32_t logits_index = 0;
  for (auto& w : work) {
    auto& s = st.policy->at(w.id);
    auto& tracked = st.seqs.at(w.id);
    if (tracked.needs_history_reset) {
      // The executor's sampler learns the tokens already in the cache (a prefix hit, a recompute).
      tracked.needs_history_reset = false;
      req.reset_ids.push_back(w.id);
      req.reset_tokens.emplace_back(s.tokens.begin(), s.tokens.begin() + w.start);
    }
    if (auto p = st.proposals.find(w.id); p != st.proposals.end()) {
      // Speculation: the last sampled token and the drafts, one logits row each.
      const auto n = p->second.tokens.size();
      std::vector<token_id> query(s.tokens.begin() + w.start, s.tokens.end());
      query.insert(query.end(), p->second.tokens.begin(), p->second.tokens.end());
      builder.add(query, w.start, w.table, static_cast<int>(n + 1));
      req.seq_ids.push_back(w.id);
      req.verify.push_back({w.id, logits_index, p->second.tokens, std::move(p->second.probs), s.params, s.seed,
                            static_cast<std::uint64_t>(s.num_output()), s.prompt_len});
      logits_index += static_cast<std::int32_t>(n + 1);
      w.drafted = static_cast<int>(n);
      w.samples = false;
      w.prompt_rows = 0;
      continue;
    }
    const bool sample = w.end == static_cast<int>(s.tokens.size());
    w.samples = sample;
    // Prompt rows: position p scores prompt token p + 1; they end where the sampled row begins.
    w.prompt_rows = 0;
    if (s.params.prompt_logprobs >= 0) {
      const int first = std::max(w.start, tracked.prompt_scored - 1);
      const int last = std::min(w.end, s.prompt_len - 1);
      w.prompt_rows = std::max(0, last - first);
      for (int p = first; p < last; ++p)
        req.rows.push_back(
            {w.id, s.params, s.seed, 0, s.prompt_len, logits_index++, s.tokens[static_cast<std::size_t>(p + 1)]});
    }
    builder.add(std::span(s.tokens).subspan(w.start, w.end - w.start), w.start, w.table,
                w.prompt_rows + (sample ? 1 : 0));
    req.seq_ids.push_back(w.id);
    if (sample)
      req.rows.push_back(
          {w.id, s.params, s.seed, static_cast<std::uint64_t>(s.num_output()), s.prompt_len, logits_index++, -1});
  }
  st.proposals.clear();
  req.batch = builder.take(st.step_id++);
  req.forget = std::move(st.pending_forget);
  st.pending_forget.clear();
  // The step's work is kept by the handlers: whichever runs gets it (they share one copy).
  auto shared_work = std::make_shared<std::vector<granted_work>>(std::move(work));
  self->request(st.executor, caf::infinite, run_step_atom::value, std::move(req))
      .then([self, shared_work](
                step_result& result) mutable { finish_step(self, std::move(*shared_work), std::move(result)); },
            [self, shared_work, used = st.executor](caf::error& err) { executor_lost(self, *shared_work, used, err); });
}

// One prepare round; on shortage, preempts victims and goes round again.
void prepare_round(sched_pointer self, kv_prepare prep, std::vector<granted_work> work) {
  auto& st = self->state;
  auto swap_in = prep.swap_in;
  auto recompute = prep.recompute;
  auto reserve = prep.reserve;
  self->request(st.kv, caf::infinite, prepare_atom::value, std::move(prep))
      .then(
          [self, swap_in, recompute, reserve, work = std::move(work)](kv_prepared& r) mutable {
            auto& st = self->state;
            for (auto id : r.swapped_out)
              note_preempted(st, id, preemption_mode::swap);
            for (auto id : r.swap_fell_back) {
              note_preempted(st, id, preemption_mode::recompute);
              ++st.stats.swap_fallbacks;
            }
            for (auto id : recompute)
              note_preempted(st, id, preemption_mode::recompute);
            for (auto id : r.swap_in_failed) // swapped, and now its host copy is lost: recompute
              note_preempted(st, id, preemption_mode::recompute);
            st.stats.swap_in_failures += r.swap_in_failed.size();
            st.stats.swap_copy_failures += static_cast<std::uint64_t>(r.swap_copy_failures);
            for (auto id : r.swapped_in)
              st.policy->swapped_in(id);
            st.stats.swap_out_bytes += r.swap_out_bytes;
            st.stats.swap_in_bytes += r.swap_in_bytes;
            st.stats.swap_in_reused_bytes += r.swap_in_reused_bytes;
            st.stats.device_blocks_free = r.device_blocks_free;
            st.stats.device_blocks_total = r.device_blocks_total;
            st.stats.host_blocks_free = r.host_blocks_free;
            st.stats.host_blocks_total = r.host_blocks_total;
            st.stats.prefix_queries = r.prefix_queries;
            st.stats.prefix_hits = r.prefix_hits;

            std::vector<seq_id> starving;
            for (std::size_t i = 0; i < r.grants.size(); ++i) {
              auto& g = r.grants[i];
              if (g.granted) {
                if (st.policy->at(g.id).status == seq_status::waiting) {
                  st.policy->admitted(g.id, g.start);
                  auto& tracked = st.seqs.at(g.id);
                  if (tracked.cached_tokens < 0) {
                    tracked.cached_tokens = g.start;
                    tracked.first_scheduled_ns = st.step_start.time_since_epoch().count();
                  }
                }
                work.push_back({g.id, g.start, g.end, std::move(g.block_table)});
              } else if (std::find(r.swap_in_refused.begin(), r.swap_in_refused.end(), g.id) ==
                             r.swap_in_refused.end() &&
                         std::find(r.swap_in_failed.begin(), r.swap_in_failed.end(), g.id) == r.swap_in_failed.end()) {
                starving.push_back(g.id);
              }
            }
            // Blocks are short: the least urgent running sequence yields (maybe the starving one itself).
            kv_prepare next;
            std::unordered_set<seq_id> victims;
            for (auto id : starving) {
              if (victims.contains(id))
                continue;
              auto victim = st.policy->victim_for(id);
              if (!victim) {
                // Nothing may yield. If nothing runs at all, it can never fit: say so.
                bool anything_runs = !work.empty() || st.policy->num_running() > 0;
                if (!anything_runs && st.policy->at(id).status == seq_status::waiting)
                  fail_sequence(st, id, "prompt_too_long",
                                "the sequence needs more KV-cache blocks than the engine has (" +
                                    std::to_string(r.device_blocks_total) + " blocks of " +
                                    std::to_string(st.settings.block_size) + " tokens)");
                continue;
              }
              if (!victims.insert(*victim).second) {
                // Already yielding this round for another starving sequence: try this one again with it gone.
                if (*victim != id)
                  for (const auto& e : reserve)
                    if (e.id == id)
                      next.reserve.push_back(entry_for(st, {id, e.num_tokens}));
                continue;
              }
              if (st.policy->config().preemption == preemption_mode::swap)
                next.swap_out.push_back(*victim);
              else
                next.recompute.push_back(*victim);
              std::erase_if(work, [&](const granted_work& w) { return w.id == *victim; });
              if (*victim != id)
                for (const auto& e : reserve)
                  if (e.id == id)
                    next.reserve.push_back(entry_for(st, {id, e.num_tokens}));
            }
            if (next.swap_out.empty() && next.recompute.empty()) {
              run_step(self, std::move(work));
              return;
            }
            next.release = std::move(st.pending_release);
            st.pending_release.clear();
            prepare_round(self, std::move(next), std::move(work));
          },
          [self](caf::error& err) { fail_everything(self, "the KV cache failed: " + to_string(err)); });
}

// Decode-phase sequences that speculate this step, and how far: prefill chunks
// never do, nor requests that want logprobs, nor a sequence with no room left.
draft_request speculation_for(scheduler_state& st, const runtime::step_plan& plan) {
  draft_request out;
  if (!st.draft)
    return out;
  for (const auto& w : plan.work) {
    const auto& s = st.policy->at(w.id);
    auto& tracked = st.seqs.at(w.id);
    const int len = static_cast<int>(s.tokens.size());
    if (tracked.max_speculative_tokens <= 0 || s.status != seq_status::running || w.num_tokens != 1 ||
        s.num_computed != len - 1 || s.num_output() == 0 || s.params.logprobs >= 0 || s.params.prompt_logprobs >= 0)
      continue;
    // k drafts write positions up to len - 1 + k and may emit k + 1 tokens.
    const int room = std::min(st.settings.max_model_len - len, s.params.max_tokens - s.num_output() - 1);
    int k = std::min(tracked.max_speculative_tokens, room);
    if (tracked.speculation) {
      tracked.speculation->set_draft_cost(st.speculation_cost.per_draft_token(st.draft_cost));
      k = std::min(k, tracked.speculation->next_k());
    }
    if (k <= 0)
      continue;
    out.seqs.push_back({w.id, s.tokens, k, s.params, s.seed, static_cast<std::uint64_t>(s.num_output()), s.prompt_len});
  }
  return out;
}

void prepare_plan(sched_pointer self, const runtime::step_plan& plan);

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
  if (st.back_to_back_since && st.stats.step_gap_us.size() < engine_stats::max_samples)
    st.stats.step_gap_us.push_back(
        std::chrono::duration<double, std::micro>(st.step_start - *st.back_to_back_since).count());
  st.back_to_back_since.reset();
  auto plan = st.policy->plan();
  st.plan_was_empty = plan.empty();
  auto drafts = speculation_for(st, plan);
  if (drafts.seqs.empty()) {
    if (st.draft && !st.pending_draft_forget.empty()) {
      caf::anon_send(st.draft, propose_atom::value, draft_request{{}, std::move(st.pending_draft_forget)});
      st.pending_draft_forget.clear();
    }
    prepare_plan(self, plan);
    return;
  }
  drafts.forget = std::move(st.pending_draft_forget);
  st.pending_draft_forget.clear();
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
          // A failed draft costs the step its speculation, nothing else; its sequences' draft
          // state may be half updated, so the draft forgets them and starts them afresh.
          [self, plan, drafting = std::move(drafting)](caf::error&) {
            auto& st = self->state;
            ++st.stats.draft_failures;
            st.pending_draft_forget.insert(st.pending_draft_forget.end(), drafting.begin(), drafting.end());
            prepare_plan(self, plan);
          });
}

void prepare_plan(sched_pointer self, const runtime::step_plan& plan) {
  auto& st = self->state;
  kv_prepare prep;
  prep.release = std::move(st.pending_release);
  st.pending_release.clear();
  prep.computed_ids = std::move(st.pending_computed.computed_ids);
  prep.computed_tokens = std::move(st.pending_computed.computed_tokens);
  prep.computed_counts = std::move(st.pending_computed.computed_counts);
  prep.trim_ids = std::move(st.pending_computed.trim_ids);
  prep.trim_tokens = std::move(st.pending_computed.trim_tokens);
  st.pending_computed = kv_prepare{};
  for (auto id : plan.preempt)
    (st.policy->config().preemption == preemption_mode::swap ? prep.swap_out : prep.recompute).push_back(id);
  prep.swap_in = plan.swap_in;
  for (const auto& w : plan.work) {
    prep.reserve.push_back(entry_for(st, w));
    if (auto p = st.proposals.find(w.id); p != st.proposals.end())
      prep.reserve.back().num_tokens += static_cast<int>(p->second.tokens.size()); // slots for the drafts
  }
  prepare_round(self, std::move(prep), {});
}

scheduler_actor::behavior_type scheduler_behavior(sched_pointer self, scheduler_settings settings, kv_cache_actor kv,
                                                  executor_actor executor, draft_actor draft) {
  auto& st = self->state;
  st.policy = std::make_unique<runtime::scheduler_policy>(settings.policy);
  st.settings = settings;
  st.kv = std::move(kv);
  st.executor = std::move(executor);
  st.draft = std::move(draft);
  return {
      [self](enqueue_atom, sequence_spec& spec, request_actor& request) {
        auto& st = self->state;
        runtime::sequence s;
        s.id = spec.id;
        s.priority = spec.priority;
        s.arrival = spec.id;
        s.tokens = std::move(spec.prompt_ids);
        s.prompt_len = static_cast<int>(s.tokens.size());
        s.params = std::move(spec.params);
        s.seed = spec.seed;
        auto& tracked =
            st.seqs.emplace(spec.id, tracked_sequence{std::move(request), std::move(spec.stop_ids)}).first->second;
        if (st.draft) {
          tracked.max_speculative_tokens = std::clamp(
              spec.num_speculative_tokens >= 0 ? spec.num_speculative_tokens : st.settings.num_speculative_tokens, 0,
              16);
          if (st.settings.adaptive_speculation && tracked.max_speculative_tokens > 0) {
            runtime::adaptive_k_config c;
            c.k_max = tracked.max_speculative_tokens;
            tracked.speculation.emplace(c);
          }
        }
        if (!st.settings.enable_prefix_caching || s.params.prompt_logprobs >= 0) {
          st.policy->add(std::move(s));
          start_step(self);
          return;
        }
        // The sequence waits for the peek before the policy sees it, so that its first step is budgeted by
        // the tokens it computes (a shared system prompt would otherwise take the budget of several prompts).
        auto tokens = s.tokens;
        self->request(st.kv, caf::infinite, peek_prefix_atom::value, std::move(tokens))
            .then(
                [self, s](int cached) mutable {
                  s.cached_hint = cached;
                  add_peeked(self, std::move(s));
                },
                [self, s](caf::error&) mutable { add_peeked(self, std::move(s)); }); // no hint: budget it all
      },
      [self](abort_atom, seq_id id) {
        auto& st = self->state;
        if (!st.seqs.contains(id))
          return;
        ++st.stats.requests_aborted;
        if (!st.policy->contains(id)) { // its prefix peek is in flight: nothing was planned or reserved yet
          st.seqs.erase(id);
          return;
        }
        if (st.busy) {
          st.aborted_while_busy.insert(id);
        } else {
          drop_sequence(st, id);
          start_step(self);
        }
      },
      [self](kick_atom) { start_step(self); },
      [self](restart_atom, executor_actor& executor) {
        auto& st = self->state;
        ++st.stats.executor_restarts;
        st.executor = executor;
        // Sent before any later prepare (two actors' messages keep their order): copies go to the new one too.
        self->send(st.kv, restart_atom::value, std::move(executor));
        forget_sampler_histories(st);
        st.waiting_for_executor = false;
        start_step(self);
      },
      [self](restart_atom, draft_actor& draft) {
        auto& st = self->state;
        ++st.stats.draft_restarts;
        st.draft = std::move(draft);
        // The restarted draft reset its proposer: every sequence starts its drafts afresh, nothing to forget.
        st.pending_draft_forget.clear();
      },
      [self](stats_atom) -> engine_stats {
        auto& st = self->state;
        auto out = st.stats;
        out.running = static_cast<int>(st.policy->num_running());
        out.waiting = static_cast<int>(st.policy->num_waiting());
        out.swapped = static_cast<int>(st.policy->num_swapped());
        return out;
      },
  };
}

} // namespace

scheduler_actor spawn_scheduler(caf::actor_system& sys, scheduler_settings settings, kv_cache_actor kv,
                                executor_actor executor, draft_actor draft) {
  return sys.spawn(scheduler_behavior, settings, std::move(kv), std::move(executor), std::move(draft));
}

} // namespace troupe::actors
