// A sequence as the scheduler sees it: its tokens (prompt, then output), how
// many of them have K/V in the cache, its urgency, and where it waits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/sampling_params.hpp"
#include "runtime/step_batch.hpp"

namespace troupe::runtime {

using seq_id = std::uint64_t;

enum class seq_status { waiting, running, swapped };

struct sequence {
  seq_id id = 0;
  int priority = 0;             // lower = more urgent (only the priority policy looks at it)
  std::uint64_t arrival = 0;    // engine-wide arrival order; ties in urgency go to the earlier one
  std::vector<token_id> tokens; // prompt followed by output
  int prompt_len = 0;
  int num_computed = 0; // tokens[0, num_computed) have their K/V in the cache
  // Waiting: prompt tokens the prefix cache held when the sequence arrived (a hint: the KV cache decides at
  // admission). Budgeting by it lets one step prefill as many prompts as the tokens they really compute allow.
  int cached_hint = 0;
  seq_status status = seq_status::waiting;
  sampling_params params;
  std::uint64_t seed = 0;
  // The sequences this one stands for: params.choices() from arrival until the others are forked off it (once
  // all but its last prompt token are computed: scheduler_policy::fork_choices), then 1. It takes that many seats.
  int choices = 1;

  int num_output() const { return static_cast<int>(tokens.size()) - prompt_len; }
  int num_uncomputed() const { return static_cast<int>(tokens.size()) - num_computed; }
  // The tokens a step would compute to finish it: at admission the cached prefix is skipped.
  int num_to_compute() const {
    return num_uncomputed() - (status == seq_status::waiting ? std::min(cached_hint, num_uncomputed() - 1) : 0);
  }
  // More than one token to compute: a prompt (or a recomputed sequence) still being prefilled.
  bool prefilling() const { return num_uncomputed() > 1; }
};

} // namespace troupe::runtime
