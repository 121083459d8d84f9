// Which sequences run in the next step, and how many tokens each computes:
// continuous batching under max-num-seqs (seats) and max-num-batched-tokens
// (budget), chunked prefill, fcfs or priority order, and preemption decisions.
// Blocks are not its business: the KV-cache side grants or refuses them, and
// the scheduler reports back through the outcome hooks below.
#pragma once

#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/sequence.hpp"

namespace troupe::runtime {

enum class scheduling_policy { fcfs, priority };
enum class preemption_mode { swap, recompute };
std::string_view to_string(scheduling_policy p);
std::string_view to_string(preemption_mode m);

struct scheduler_config {
  int max_num_seqs = 64;             // seats: sequences in one step
  int max_num_batched_tokens = 2048; // budget: tokens in one step (decodes + prefill chunks)
  scheduling_policy policy = scheduling_policy::fcfs;
  preemption_mode preemption = preemption_mode::swap;
  // > 0: decode-aware chunked prefill. A step that carries decodes gives its prefill chunks at most this
  // many tokens, so that a long prompt cannot hold every decoding sequence for a whole budget's step;
  // a step without decodes still prefills up to the budget. 0: prefills take all the budget left.
  int max_prefill_tokens_with_decodes = 0;
};

// Compute num_tokens tokens of sequence id, starting at its num_computed.
struct scheduled_work {
  seq_id id = 0;
  int num_tokens = 0;
};

struct step_plan {
  std::vector<seq_id> preempt;      // running sequences to preempt so that more urgent ones get seats
  std::vector<seq_id> swap_in;      // swapped sequences to bring back to the device
  std::vector<scheduled_work> work; // decodes first (urgency order), then prefill chunks
  bool empty() const { return preempt.empty() && swap_in.empty() && work.empty(); }
};

struct shortage_plan {
  std::vector<seq_id> preempt;    // running sequences that give their blocks up, in order
  std::vector<seq_id> retry;      // starving sequences to reserve again once those are gone
  std::vector<seq_id> never_fits; // waiting sequences that need more blocks than the whole cache
};

class scheduler_policy {
 public:
  explicit scheduler_policy(scheduler_config cfg);

  const scheduler_config& config() const { return cfg_; }

  void add(sequence s); // joins the waiting queue
  void remove(seq_id id);
  bool contains(seq_id id) const { return seqs_.contains(id); }
  sequence& at(seq_id id);
  const sequence& at(seq_id id) const;

  // The next step. Admits waiting and swapped sequences by urgency while seats
  // and budget last; under the priority policy a more urgent waiting or swapped
  // sequence takes the seat of the least urgent running one (named in preempt).
  step_plan plan() const;

  // Outcome hooks: what the KV cache and the executor made of the plan.
  void admitted(seq_id id, int cached_tokens); // waiting -> running; cached_tokens had a prefix hit
  void swapped_in(seq_id id);                  // swapped -> running
  // running -> swapped (keeps its K/V on the host), or -> waiting (recompute: its
  // output becomes part of what is prefilled again; nothing is lost).
  void preempted(seq_id id, preemption_mode how);
  void computed(seq_id id, int total_computed);
  void append_token(seq_id id, token_id t);

  // A sequence standing for several choices that has computed all but its last prompt token (or more: a
  // prefix hit can carry it further) is ready to fork.
  bool ready_to_fork(seq_id id) const;
  // Forks choices 1.. off it (runtime/choices.hpp ids and seeds): each a copy holding its prompt, computed up to
  // the last prompt token, in the parent's status, so that every choice computes that token and samples its own
  // first token. The parent stands for itself from now on. Returns the new ids; the KV cache must fork the
  // parent's blocks for each running one (kv_followup::forks).
  std::vector<seq_id> fork_choices(seq_id parent);

  // Blocks are short for `starving`: the running sequence to preempt for it — the
  // least urgent one, if it is less urgent than starving (or starving itself when
  // it is the least urgent running sequence); nullopt when nobody should yield.
  std::optional<seq_id> victim_for(seq_id starving) const;

  // Blocks were short for `starving` (in reservation order): who yields, by
  // victim_for, each victim once. anything_runs: some sequence runs or was granted
  // work this step; when none does, a waiting sequence that still finds no room never will.
  shortage_plan plan_for_shortage(std::span<const seq_id> starving, bool anything_runs) const;

  std::size_t num_waiting() const { return count(seq_status::waiting); }
  std::size_t num_running() const { return count(seq_status::running); }
  std::size_t num_swapped() const { return count(seq_status::swapped); }
  bool idle() const { return seqs_.empty(); }

  // True when a is more urgent than b (priority, then arrival, then id: a request's choices share its arrival).
  bool more_urgent(const sequence& a, const sequence& b) const;

 private:
  std::size_t count(seq_status s) const;
  std::vector<const sequence*> by_urgency(seq_status s) const;

  scheduler_config cfg_;
  std::unordered_map<seq_id, sequence> seqs_;
};

} // namespace troupe::runtime
