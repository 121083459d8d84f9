// What a request changes in its logits before the sampler's transforms: OpenAI's
// logit_bias (added to the named tokens) and vLLM's min_tokens (the stop ids
// masked to -inf until the output has min_tokens tokens). A sequence's rules are
// fixed at admission; the executor holds them with its history, so that no step
// message carries them. The order is vLLM's: these edits, then the penalties.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sampling_params.hpp"

namespace troupe::runtime {

// The edits of one logits row: add each bias, then set each banned id to -inf.
struct logit_edits {
  std::span<const token_bias> bias; // distinct ids
  std::span<const token_id> banned; // distinct ids

  bool empty() const { return bias.empty() && banned.empty(); }
};

struct logit_rules {
  std::vector<token_bias> bias;   // sorted by id, distinct
  std::vector<token_id> stop_ids; // sorted, distinct: masked while the output is shorter than min_tokens, and
                                  // with a constraint, allowed only once the constraint accepts the output
  int min_tokens = 0;
  // Structured output: every token the constraint does not take is banned (runtime::step_sampler
  // keeps the sequence's parse state; at() leaves it out).
  output_constraint constraint;

  bool empty() const { return bias.empty() && (min_tokens == 0 || stop_ids.empty()) && constraint.empty(); }
  // The edits for the row that samples output token `output_index` (0 = the first).
  logit_edits at(std::uint64_t output_index) const;
  bool operator==(const logit_rules&) const = default;
};

// A request's rules: its logit_bias, and its stop ids (runtime::stop_ids_for) masked
// until min_tokens. Ids outside [0, vocab) are the request's error, refused at admission.
logit_rules logit_rules_for(const sampling_params& params, std::span<const token_id> stop_ids);

// Applies edits to one row in place: logits[id] += bias (one float add, as the device does),
// then logits[id] = -inf for the banned ids. Ids outside the row are ignored.
void apply_logit_edits(std::span<float> logits, const logit_edits& edits);

} // namespace troupe::runtime
