// The engine's own conversation, in one place: what its actors say to each other
// each step. What clients send and receive is in troupe/messages.hpp (included).
// Reading this file top to bottom is reading the engine's conversation (DESIGN.md §2).
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/block_manager.hpp"
#include "runtime/kv_followup.hpp"
#include "runtime/logit_rules.hpp"
#include "runtime/logprobs.hpp"
#include "runtime/model_runner.hpp"
#include "runtime/sampling_params.hpp"
#include "runtime/sequence_failure.hpp"
#include "runtime/step_batch.hpp"
#include "runtime/step_rows.hpp"
#include "troupe/engine_stats.hpp"
#include "troupe/messages.hpp"

namespace troupe {

using runtime::seq_id;

// ---------------------------------------------------------------------------
// The engine's own atoms (at most 10 characters: CAF 0.17 encodes them in 60 bits);
// the client's are in troupe/messages.hpp.
using enqueue_atom = caf::atom_constant<caf::atom("enqueue")>;
using abort_atom = caf::atom_constant<caf::atom("abort")>;
using tokens_atom = caf::atom_constant<caf::atom("tokens")>;
using prepare_atom = caf::atom_constant<caf::atom("prepare")>;
using run_step_atom = caf::atom_constant<caf::atom("run_step")>;
using copy_atom = caf::atom_constant<caf::atom("copy")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using kick_atom = caf::atom_constant<caf::atom("kick")>;
using propose_atom = caf::atom_constant<caf::atom("propose")>;
using peek_prefix_atom = caf::atom_constant<caf::atom("peekprefix")>;
using restart_atom = caf::atom_constant<caf::atom("restarted")>;
using follow_atom = caf::atom_constant<caf::atom("follow")>;

// ---------------------------------------------------------------------------
// Inside the engine.

// request actor -> scheduler: a tokenized, validated sequence to schedule.
struct sequence_spec {
  seq_id id = 0;
  std::vector<token_id> prompt_ids;
  runtime::sampling_params params;
  std::uint64_t seed = 0; // params.seed, or one the engine drew
  int priority = 0;
  std::vector<token_id> stop_ids;  // the ids that end it (model defaults unless ignore_eos, plus its own)
  int num_speculative_tokens = -1; // request_spec's override
};

// scheduler -> request actor: new tokens of its sequence; `finish_reason` is
// non-empty when the scheduler ended the sequence ("stop" on a stop id, "length").
struct sequence_tokens {
  seq_id id = 0;
  std::vector<token_id> ids;
  std::string finish_reason;
  int cached_tokens = 0;                         // on the first tokens message: prompt tokens from the prefix cache
  std::int64_t first_scheduled_ns = 0;           // on the first tokens message: steady_clock time the prefill began
  std::vector<runtime::token_logprobs> logprobs; // one per id, when params.logprobs >= 0
  std::vector<runtime::token_logprobs> prompt_logprobs; // first message: prompt tokens 1.., when asked
  std::int64_t sampled_ns = 0;                          // steady_clock time the executor finished the step
};

using request_actor =
    caf::typed_actor<caf::reacts_to<tokens_atom, sequence_tokens>, caf::reacts_to<failed>, caf::reacts_to<cancel_atom>>;

// scheduler -> kv_cache, once per step: everything the cache must do before the step can run.
struct reserve_entry {
  seq_id id = 0;
  std::vector<token_id> tokens; // new sequence: all its tokens (prefix lookup); known one: empty
  int start = 0;                // tokens[0, start) are computed (ignored for a new sequence)
  int num_tokens = 0;           // tokens the step computes, from start
  bool lookup_prefix = true;    // false: compute the whole prompt (prompt logprobs need every row)
};
struct kv_prepare {
  std::vector<seq_id> release;   // finished or aborted: free their blocks
  std::vector<seq_id> swap_out;  // preempted with mode swap
  std::vector<seq_id> recompute; // preempted with mode recompute: free their blocks
  std::vector<seq_id> swap_in;
  std::vector<reserve_entry> reserve; // in scheduling order: decodes first
  // What finished steps left: full blocks for the prefix index, rejected drafts' slots to trim.
  runtime::kv_followup followup;
};
struct reserve_grant {
  seq_id id = 0;
  bool granted = false; // false: blocks were short, nothing changed for it
  int start = 0;        // first token computed (after a prefix hit for a new sequence)
  int end = 0;          // tokens [start, end) are computed this step
  std::vector<std::int32_t> block_table;
};
struct kv_prepared {
  std::vector<seq_id> swapped_out;
  std::vector<seq_id> swap_fell_back; // host tier full, or the copy out failed: freed instead (recompute)
  std::vector<seq_id> swapped_in;
  std::vector<seq_id> swap_in_refused; // device blocks short: still swapped
  std::vector<seq_id> swap_in_failed;  // the copy back failed: their blocks are gone, they recompute
  std::vector<reserve_grant> grants;
  std::uint64_t swap_out_bytes = 0, swap_in_bytes = 0, swap_in_reused_bytes = 0;
  int device_blocks_free = 0, device_blocks_total = 0, host_blocks_free = 0, host_blocks_total = 0;
  std::uint64_t prefix_queries = 0, prefix_hits = 0;
  std::uint64_t window_released_blocks = 0; // since start: blocks given back out of a sliding window
  int swap_copy_failures = 0; // swap copies (out or in) that failed this prepare
};

// kv_cache -> executor: block copies (swap out: device->host, swap in:
// host->device, copy-on-write: device->device), done before the reply.
struct copy_request {
  runtime::kv_copy kind = runtime::kv_copy::device_to_device;
  std::vector<runtime::block_copy> pairs;
};

// scheduler -> executor: one forward step and what to do with each logits row
// (runtime/step_rows.hpp: sample_row, spec_row; runtime::step_builder makes them).
using runtime::sample_row;
using runtime::spec_row;
struct step_request {
  runtime::step_batch batch;
  std::vector<spec_row> verify; // speculating sequences (no rows entry of their own)
  std::vector<seq_id> seq_ids;  // [B] which sequence each batch entry is
  std::vector<sample_row> rows; // one per batch.logits_rows entry
  std::vector<seq_id> forget;   // sequences that ended: drop their sampling history
  // Sequences (re)starting this step: the tokens already in the cache (a prefix
  // hit), so the sampler's history for penalties is complete.
  std::vector<seq_id> reset_ids;
  std::vector<std::vector<token_id>> reset_tokens;
  std::vector<runtime::logit_rules> reset_rules; // one per reset_ids entry (logit_bias, min_tokens)
};
struct step_result {
  std::uint64_t step_id = 0;
  std::vector<token_id> sampled; // one per step_request::rows entry
  double forward_us = 0;         // time inside the model runner
  double sample_us = 0;          // sampling and verification
  double verify_us = 0;          // of which verification
  double constraint_us = 0;      // of which structured-output masks (0: no constrained row)
  std::string error;             // non-empty: the step failed, nothing was sampled
  // One per rows entry when any row asked for logprobs (empty entries for rows that did not).
  std::vector<runtime::token_logprobs> logprobs;
  std::int64_t finished_ns = 0;                // steady_clock time the step's tokens left the executor
  std::vector<std::vector<token_id>> verified; // per verify entry: accepted drafts, then the corrected/bonus token
  std::vector<runtime::sequence_failure> failures; // their rows' tokens are not emitted
};

// scheduler -> draft, before a step with speculating sequences: propose up to k
// tokens each. The history is the whole sequence; the draft rolls its own cache
// back to where its cached tokens part from it (the accepted length).
struct draft_entry {
  seq_id id = 0;
  std::vector<token_id> history;
  int k = 0;
  runtime::sampler_settings params;
  std::uint64_t seed = 0;
  std::uint64_t step = 0; // output index of the first draft token
  int prompt_len = 0;
  bool reproducible = false; // the request set a seed (runtime::draft_input)
};
struct draft_request {
  std::vector<draft_entry> seqs;
  std::vector<seq_id> forget; // ended sequences: their draft state goes
};
struct draft_proposal {
  seq_id id = 0;
  std::vector<token_id> tokens; // may be fewer than k, or none
  std::vector<float> probs;     // [tokens, vocab] q, or empty (deterministic)
};
struct draft_reply {
  std::vector<draft_proposal> proposals;
  double draft_us = 0; // time inside the proposer
};
using draft_actor = caf::typed_actor<caf::replies_to<propose_atom, draft_request>::with<draft_reply>>;

using executor_actor = caf::typed_actor<caf::replies_to<run_step_atom, step_request>::with<step_result>,
                                        caf::replies_to<copy_atom, copy_request>::with<done_atom>>;

// A tensor-parallel group (engine.tensor-parallel-size N > 1): the executor above is rank 0 and
// leads; ranks 1..N-1 are rank executors. Each step and block copy the executor gets goes to
// every rank, and the executor replies once, when all have answered.
//
// executor -> rank executor, once per step: the step's forward pass, run with the other ranks
// (its logits go nowhere). The executor counts the [debug] executor faults once per step, as
// one executor does, and aims each at one rank (runtime::fault_injector::fault_rank).
struct rank_step {
  runtime::step_batch batch;
  bool inject_step_fault = false; // the rank's step throws, as a model error would
  bool inject_crash = false;      // the rank dies on it
};
// rank executor -> executor, for a step or a block copy.
struct rank_done {
  std::string error;    // empty: the rank did its part
  bool aborted = false; // it stopped because another rank aborted the group (not the cause)
};
using rank_executor_actor = caf::typed_actor<caf::replies_to<follow_atom, rank_step>::with<rank_done>,
                                             caf::replies_to<copy_atom, copy_request>::with<rank_done>>;

using kv_cache_actor =
    caf::typed_actor<caf::replies_to<prepare_atom, kv_prepare>::with<kv_prepared>,
                     // A new prompt: how many of its tokens the prefix cache holds now (changes nothing). The
                     // scheduler budgets the prompt's first step by what is left to compute.
                     caf::replies_to<peek_prefix_atom, std::vector<token_id>>::with<int>,
                     // engine (through the scheduler) -> kv_cache: the executor was restarted; copies go to this one
                     caf::reacts_to<restart_atom, executor_actor>>;

using scheduler_actor =
    caf::typed_actor<caf::reacts_to<enqueue_atom, sequence_spec, request_actor>,
                     caf::reacts_to<abort_atom, seq_id>, // cancel, stop string, client gone: blocks come back next step
                     caf::reacts_to<kick_atom>,          // start the step loop if it is idle
                     caf::replies_to<stats_atom>::with<engine_stats>,
                     // engine -> scheduler: a part died and was restarted (the engine supervises them); steps go to
                     // this one
                     caf::reacts_to<restart_atom, executor_actor>, caf::reacts_to<restart_atom, draft_actor>>;

// ---------------------------------------------------------------------------
// inspect overloads (CAF needs one per message type).

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sequence_spec& x) {
  return f(caf::meta::type_name("sequence_spec"), x.id, x.prompt_ids, x.params, x.seed, x.priority, x.stop_ids,
           x.num_speculative_tokens);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sequence_tokens& x) {
  return f(caf::meta::type_name("sequence_tokens"), x.id, x.ids, x.finish_reason, x.cached_tokens, x.first_scheduled_ns,
           x.logprobs, x.prompt_logprobs, x.sampled_ns);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reserve_entry& x) {
  return f(caf::meta::type_name("reserve_entry"), x.id, x.tokens, x.start, x.num_tokens, x.lookup_prefix);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_prepare& x) {
  return f(caf::meta::type_name("kv_prepare"), x.release, x.swap_out, x.recompute, x.swap_in, x.reserve, x.followup);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reserve_grant& x) {
  return f(caf::meta::type_name("reserve_grant"), x.id, x.granted, x.start, x.end, x.block_table);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_prepared& x) {
  return f(caf::meta::type_name("kv_prepared"), x.swapped_out, x.swap_fell_back, x.swapped_in, x.swap_in_refused,
           x.swap_in_failed, x.grants, x.swap_out_bytes, x.swap_in_bytes, x.swap_in_reused_bytes, x.device_blocks_free,
           x.device_blocks_total, x.host_blocks_free, x.host_blocks_total, x.prefix_queries, x.prefix_hits,
           x.window_released_blocks, x.swap_copy_failures);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, copy_request& x) {
  auto kind = static_cast<std::uint8_t>(x.kind);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.kind = static_cast<runtime::kv_copy>(kind);
    return caf::none;
  });
  return f(caf::meta::type_name("copy_request"), kind, x.pairs, load);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rank_step& x) {
  return f(caf::meta::type_name("rank_step"), x.batch, x.inject_step_fault, x.inject_crash);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rank_done& x) {
  return f(caf::meta::type_name("rank_done"), x.error, x.aborted);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, draft_entry& x) {
  return f(caf::meta::type_name("draft_entry"), x.id, x.history, x.k, x.params, x.seed, x.step, x.prompt_len,
           x.reproducible);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, draft_request& x) {
  return f(caf::meta::type_name("draft_request"), x.seqs, x.forget);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, draft_proposal& x) {
  return f(caf::meta::type_name("draft_proposal"), x.id, x.tokens, x.probs);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, draft_reply& x) {
  return f(caf::meta::type_name("draft_reply"), x.proposals, x.draft_us);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_request& x) {
  return f(caf::meta::type_name("step_request"), x.batch, x.verify, x.seq_ids, x.rows, x.forget, x.reset_ids,
           x.reset_tokens, x.reset_rules);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_result& x) {
  return f(caf::meta::type_name("step_result"), x.step_id, x.sampled, x.forward_us, x.sample_us, x.verify_us,
           x.constraint_us, x.error, x.logprobs, x.finished_ns, x.verified, x.failures);
}

} // namespace troupe

// The runtime types that travel inside messages. runtime/ knows nothing of CAF,
// so their inspect overloads live here, in their own namespace for ADL.
namespace troupe::runtime {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampler_settings& x) {
  return f(caf::meta::type_name("sampler_settings"), x.temperature, x.top_p, x.top_k, x.min_p, x.repetition_penalty,
           x.frequency_penalty, x.presence_penalty, x.logprobs, x.prompt_logprobs);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, logit_rules& x) {
  return f(caf::meta::type_name("logit_rules"), x.bias, x.stop_ids, x.min_tokens, x.constraint);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_followup& x) {
  return f(caf::meta::type_name("kv_followup"), x.computed_ids, x.computed_tokens, x.computed_counts, x.trim_ids,
           x.trim_tokens, x.fork_parents, x.fork_children);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_logprobs& x) {
  return f(caf::meta::type_name("token_logprobs"), x.token, x.logprob, x.top_ids, x.top_logprobs);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_batch& x) {
  return f(caf::meta::type_name("step_batch"), x.step_id, x.token_ids, x.positions, x.query_start, x.seq_lens,
           x.block_tables, x.max_blocks_per_seq, x.slot_mapping, x.logits_rows);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sample_row& x) {
  return f(caf::meta::type_name("sample_row"), x.id, x.params, x.seed, x.step, x.prompt_len, x.logits_index,
           x.score_target);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, spec_row& x) {
  return f(caf::meta::type_name("spec_row"), x.id, x.first_logits_index, x.draft, x.draft_probs, x.params, x.seed,
           x.step, x.prompt_len);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, block_copy& x) {
  return f(caf::meta::type_name("block_copy"), x.src, x.dst);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sequence_failure& x) {
  return f(caf::meta::type_name("sequence_failure"), x.id, x.message);
}

} // namespace troupe::runtime
