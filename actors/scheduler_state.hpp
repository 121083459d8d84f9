// The scheduler actor's state, shared by its two files: scheduler.cpp (the
// sequences' lifecycle: enqueue, abort, restarts, stats) and scheduler_step.cpp
// (one step's message sequence). Internal to actors/.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "actors/scheduler.hpp"
#include "actors/scheduler_stats.hpp"
#include "runtime/choices.hpp"
#include "runtime/logit_rules.hpp"
#include "runtime/speculation_planner.hpp"
#include "runtime/step_outcome.hpp"

namespace troupe::actors::detail {

using clock = std::chrono::steady_clock;

// What the actor keeps of a sequence besides the policy's view of it: its client, and what its
// first token message and the resume statistics need.
struct tracked_sequence {
  request_actor request;
  int num_speculative_tokens = -1; // the request's cap (its forked choices get it too)
  std::vector<token_id> stop_ids;
  runtime::logit_rules logit_rules; // logit_bias and min_tokens, for the executor's sampler at each reset
  bool admitted_once = false;       // its first token has been sent
  int cached_tokens = -1;           // prompt tokens the prefix cache had at first admission
  bool needs_history_reset = true;  // the executor's sampler must learn its cached tokens
  std::int64_t first_scheduled_ns = 0;
  // Prompt logprobs: collected chunk by chunk, sent with the first token; prompt_scored = the next
  // prompt token to score (token 0 has none).
  int prompt_scored = 1;
  std::vector<runtime::token_logprobs> prompt_logprobs;
  // Set while preempted: when, and how; cleared by its next token (engine_stats' resume times).
  std::optional<clock::time_point> preempted_at;
  runtime::preemption_mode preempted_by = runtime::preemption_mode::swap;
};

struct scheduler_state {
  std::unique_ptr<runtime::scheduler_policy> policy;
  std::unique_ptr<runtime::step_outcome> outcome;
  std::optional<runtime::speculation_planner> speculation; // with a draft actor only
  scheduler_settings settings;
  kv_cache_actor kv;
  executor_actor executor;
  draft_actor draft;
  std::unordered_map<seq_id, tracked_sequence> seqs;
  std::unordered_map<seq_id, draft_proposal> proposals; // this step's drafts, by sequence
  // What the next prepare, step and proposal carry for sequences that ended.
  std::vector<seq_id> pending_release, pending_forget, pending_draft_forget;
  std::unordered_set<seq_id> aborted_while_busy;
  bool busy = false;
  // The executor died under a step and the engine's restart has not arrived yet: no steps until it does.
  bool waiting_for_executor = false;
  bool plan_was_empty = false; // the step in progress had nothing to compute, only blocks to release
  std::uint64_t step_id = 0;
  clock::time_point step_start;
  double step_draft_us = 0; // the draft's proposer time in this step
  // The previous step's end, while steps follow one another with no idle time between:
  // the gap to the next step's start is host time the device sits idle.
  std::optional<clock::time_point> back_to_back_since;
  scheduler_stats stats;
  static inline const char* name = "scheduler";
};

using sched_pointer = scheduler_actor::stateful_pointer<scheduler_state>;

// scheduler_step.cpp: starts a step unless one runs, the executor is being restarted, or nothing is to do.
void start_step(sched_pointer self);

// scheduler.cpp: ends a sequence on the scheduler's side (its blocks go back with the next prepare),
// telling its client first when it failed.
void drop_sequence(scheduler_state& st, seq_id id);
void fail_sequence(scheduler_state& st, seq_id id, std::string code, std::string message);
// Every sequence's sampling history must be sent again: the executor that knew them is gone.
void forget_sampler_histories(scheduler_state& st);
// n / best_of: once a sequence standing for several choices has computed all but its last prompt token,
// the other choices become sequences of their own with the same client (scheduler_policy::fork_choices).
void fork_if_ready(scheduler_state& st, seq_id id);
// engine_stats counts requests: a request's first choice stands for it.
inline bool counts_as_request(seq_id id) {
  return runtime::choice_index(id) == 0;
}

} // namespace troupe::actors::detail
