// When a sequence ends on a token it just got: a stop id, or its length limit
// (max_tokens of output, or the context). One rule for the engine's scheduler
// and the offline generator; stop strings are the text side's (stop_matcher).
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "runtime/sampling_params.hpp"

namespace troupe::runtime {

enum class finish_reason { none, stop, length };
std::string_view to_string(finish_reason reason); // "" | "stop" | "length"

struct finish_limits {
  int max_tokens = 0;    // output tokens at most (sampling_params::max_tokens)
  int max_model_len = 0; // prompt + output tokens at most (the context)
  int min_tokens = 0;    // a stop id ends the output only after this many other tokens (vLLM's min_tokens)
};

// After `last` joined a sequence that now has num_tokens tokens, num_output of them output.
// (Before min_tokens the samplers mask the stop ids, so a stop id there is only possible for
// a sampler without the mask; it does not end the output.)
finish_reason finish_after(token_id last, std::span<const token_id> stop_ids, int num_output, int num_tokens,
                           const finish_limits& limits);

// The ids that end a request: its own stop_token_ids, plus the model's defaults unless ignore_eos.
std::vector<token_id> stop_ids_for(const sampling_params& params, std::span<const token_id> model_defaults);

} // namespace troupe::runtime
