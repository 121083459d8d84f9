// A request's choices (sampling_params n / best_of) as sequences of their own:
// their ids, their seeds, and which of them best_of returns. Choice 0 is the
// request's own sequence; the others are forked from it once it has computed
// all but the last prompt token (scheduler_policy::fork_choices), so they share
// the prompt's KV blocks and each samples its first token from its own copy of
// the last position.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sequence.hpp"

namespace troupe::runtime {

// Choice i's sequence id: the request's id with i in the top byte. Request ids are
// an engine counter, so the two never meet (max_choices < 2^7).
inline constexpr int choice_id_shift = 56;
seq_id choice_seq_id(seq_id first, int index);
int choice_index(seq_id id);
seq_id first_choice(seq_id id);

// Choice i's seed: the request's for choice 0 (n = 1 draws as it always did), a
// well-mixed function of (seed, i) for the others, so a seeded request gets the
// same n choices every time and no two choices share a stream.
std::uint64_t choice_seed(std::uint64_t seed, int index);

// best_of: the indexes of the n choices with the highest sum of their tokens'
// logprobs, best first (ties: the lower index first).
std::vector<int> best_choices(std::span<const double> cumulative_logprobs, int n);

} // namespace troupe::runtime
