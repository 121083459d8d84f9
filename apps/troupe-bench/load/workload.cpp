// Builds the benchmark's requests. Each random choice has its own seeded stream, so
// changing one option (say the priority mix) leaves the other draws as they were.
#include "apps/troupe-bench/load/workload.hpp"

#include <algorithm>
#include <charconv>
#include <random>
#include <stdexcept>

namespace troupe::bench {

namespace {

enum class stream : std::uint64_t { lengths = 1, prefix, prompts, priorities };

// A stream of its own per choice; `index` separates the prompts' streams (prompt i's draw
// does not depend on how many prompts there are, nor on how the others were repaired).
std::mt19937_64 engine_for(std::uint64_t seed, stream which, std::uint64_t index = 0) {
  std::seed_seq seq{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                    static_cast<std::uint32_t>(which), static_cast<std::uint32_t>(index),
                    static_cast<std::uint32_t>(index >> 32)};
  return std::mt19937_64(seq);
}

// vLLM's random dataset: an integer uniform in [floor(len*(1-r)), floor(len*(1+r))], at least 1.
std::uniform_int_distribution<int> length_range(int len, double ratio) {
  int lo = std::max(1, static_cast<int>(len * (1.0 - ratio)));
  int hi = std::max(lo, static_cast<int>(len * (1.0 + ratio)));
  return std::uniform_int_distribution<int>(lo, hi);
}

double parse_double(std::string_view s, std::string_view what) {
  try {
    std::size_t used = 0;
    double x = std::stod(std::string(s), &used);
    if (used == s.size())
      return x;
  } catch (const std::logic_error&) {
  }
  throw std::invalid_argument(std::string(what) + ": '" + std::string(s) + "' is not a number");
}

} // namespace

std::vector<priority_share> parse_priority_mix(std::string_view text) {
  std::vector<priority_share> mix;
  while (!text.empty()) {
    auto comma = text.find(',');
    auto item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    auto colon = item.find(':');
    if (colon == std::string_view::npos)
      throw std::invalid_argument("priority mix: '" + std::string(item) + "' is not PRIORITY:WEIGHT");
    priority_share share;
    auto p = item.substr(0, colon);
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), share.priority);
    if (ec != std::errc{} || end != p.data() + p.size())
      throw std::invalid_argument("priority mix: '" + std::string(p) + "' is not an integer priority");
    share.weight = parse_double(item.substr(colon + 1), "priority mix weight");
    if (!(share.weight >= 0))
      throw std::invalid_argument("priority mix: weights must be >= 0");
    mix.push_back(share);
  }
  if (!mix.empty()) {
    double total = 0;
    for (const auto& s : mix)
      total += s.weight;
    if (!(total > 0))
      throw std::invalid_argument("priority mix: the weights sum to 0");
  }
  return mix;
}

void validate(const workload_options& o) {
  if (o.num_prompts == 0)
    throw std::invalid_argument("the number of prompts must be at least 1");
  if (o.input_len < 1 || o.output_len < 1)
    throw std::invalid_argument("input and output lengths must be at least 1");
  if (o.shared_prefix_len < 0)
    throw std::invalid_argument("the shared prefix length must be >= 0");
  if (!(o.range_ratio >= 0 && o.range_ratio < 1))
    throw std::invalid_argument("the range ratio must be in [0, 1)");
}

std::vector<bench_request> build_workload(const workload_options& o, prompt_generator& prompts) {
  validate(o);
  auto lengths = engine_for(o.seed, stream::lengths);
  auto priority_rng = engine_for(o.seed, stream::priorities);

  // The prefix is the same text (and the same ids) in every prompt, so the server can share its KV blocks.
  token_prompt prefix;
  if (o.shared_prefix_len > 0) {
    auto prefix_rng = engine_for(o.prefix_seed.value_or(o.seed), stream::prefix);
    prefix = prompts.make(o.shared_prefix_len, prefix_rng);
  }

  auto input_len = length_range(o.input_len, o.range_ratio);
  auto output_len = length_range(o.output_len, o.range_ratio);
  std::vector<double> weights;
  for (const auto& s : o.priority_mix)
    weights.push_back(s.weight);
  std::discrete_distribution<std::size_t> pick_priority(weights.begin(), weights.end());

  std::vector<bench_request> requests(o.num_prompts);
  for (std::size_t i = 0; i < o.num_prompts; ++i) {
    auto& r = requests[i];
    r.index = i;
    int unique = input_len(lengths);
    r.max_tokens = output_len(lengths);
    auto prompt_rng = engine_for(o.seed, stream::prompts, i);
    auto prompt = prompts.make(unique, prompt_rng, prefix);
    r.prompt = std::move(prompt.text);
    r.prompt_len = static_cast<int>(prompt.ids.size());
    if (!o.priority_mix.empty()) {
      r.priority = o.priority_mix[pick_priority(priority_rng)].priority;
      r.has_priority = true;
    }
  }
  return requests;
}

} // namespace troupe::bench
