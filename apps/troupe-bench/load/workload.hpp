// The requests a serving benchmark sends: N prompts with input and output lengths
// drawn like vLLM's random dataset, an optional shared prefix and a priority mix.
// The prompts' text comes from a prompt_generator (token ids of the served model's vocabulary).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "apps/troupe-bench/load/prompt_generator.hpp"

namespace troupe::bench {

// One priority and the fraction of requests that get it ("0:0.8,1:0.2").
struct priority_share {
  int priority = 0;
  double weight = 1.0;
};

struct workload_options {
  std::size_t num_prompts = 64;
  int input_len = 64;                       // tokens after the shared prefix
  int output_len = 128;                     // max_tokens; with ignore_eos it is the output length
  double range_ratio = 0.0;                 // lengths uniform in [len*(1-r), len*(1+r)], as vLLM's random dataset
  int shared_prefix_len = 0;                // tokens identical in every prompt, before the input_len tokens
  std::vector<priority_share> priority_mix; // empty: no priority is sent
  std::uint64_t seed = 0;
  std::optional<std::uint64_t> prefix_seed; // the shared prefix's draw; unset = seed
};

struct bench_request {
  std::size_t index = 0;
  std::string prompt;
  int prompt_len = 0; // the prompt's tokens with the served tokenizer (the server adds BOS)
  int max_tokens = 0;
  int priority = 0;
  bool has_priority = false;
};

// Throws std::invalid_argument naming the problem: non-positive lengths, a range
// ratio outside [0, 1), or a priority mix that does not parse.
void validate(const workload_options& options);

// Deterministic for a given options.seed and served tokenizer. Each prompt tokenizes to
// exactly shared_prefix_len + its input length ids below prompts.id_limit(); prompt i is
// drawn from its own stream, so it does not change with num_prompts. Throws
// std::invalid_argument (see validate) or prompt_error.
std::vector<bench_request> build_workload(const workload_options& options, prompt_generator& prompts);

// "0:0.8,1:0.2" -> {{0, 0.8}, {1, 0.2}}; weights need not sum to 1 (they are normalised
// when drawing). "" -> {}. Throws std::invalid_argument on a malformed mix.
std::vector<priority_share> parse_priority_mix(std::string_view text);

} // namespace troupe::bench
