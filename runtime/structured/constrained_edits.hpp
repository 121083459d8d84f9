// A constrained row's logit edits: the request's own (logit_bias, min_tokens' ban) plus every
// token its constraint refuses after the output so far. One rule for the engine's step_sampler
// and the actor-free local_generator.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/logit_rules.hpp"
#include "runtime/structured/sequence_constraint.hpp"

namespace troupe::runtime::structured {

// rules.at(output_index) with the constraint's bans added; the banned ids are written to
// `storage`, which must outlive the returned edits. min_tokens' ban of the stop ids stands
// unless, with the constraint's, nothing would be left (the output is complete: the constraint
// wins). When the output already left the constraint (a row past a rejected draft), only the
// rules' edits.
logit_edits constrained_edits(sequence_constraint& constraint, const logit_rules& rules, std::uint64_t output_index,
                              std::span<const token_id> output, std::vector<token_id>& storage);

} // namespace troupe::runtime::structured
