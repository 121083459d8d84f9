// Builds the benchmark's requests. Each random choice has its own seeded stream, so
// changing one option (say the priority mix) leaves the other draws as they were.
#include "apps/troupe-bench/load/workload.hpp"

#include <algorithm>
#include <charconv>
#include <random>
#include <stdexcept>

namespace troupe::bench {

namespace {

// Whole words that the stories260k tokenizer (512-token BPE) keeps as one token,
// both at the start of a prompt and after a space: N of them are N tokens.
const std::vector<std::string_view> words = {
    "the",   "and",  "was",  "her",    "day",    "with",  "said", "play",  "his", "that", "mom",   "she",
    "you",   "they", "big",  "friend", "little", "time",  "had",  "there", "for", "want", "happy", "saw",
    "named", "but",  "very", "upon",   "it",     "to",    "in",   "on",    "up",  "of",   "we",    "so",
    "do",    "he",   "be",   "Lily",   "Tim",    "Timmy", "Once", "One",   "She", "They", "He",    "The"};

enum class stream : std::uint64_t { lengths = 1, prefix, words, priorities };

std::mt19937_64 engine_for(std::uint64_t seed, stream which) {
  std::seed_seq seq{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                    static_cast<std::uint32_t>(which)};
  return std::mt19937_64(seq);
}

// vLLM's random dataset: an integer uniform in [floor(len*(1-r)), floor(len*(1+r))], at least 1.
std::uniform_int_distribution<int> length_range(int len, double ratio) {
  int lo = std::max(1, static_cast<int>(len * (1.0 - ratio)));
  int hi = std::max(lo, static_cast<int>(len * (1.0 + ratio)));
  return std::uniform_int_distribution<int>(lo, hi);
}

void append_words(std::string& text, int count, std::mt19937_64& rng) {
  std::uniform_int_distribution<std::size_t> pick(0, words.size() - 1);
  for (int i = 0; i < count; ++i) {
    if (!text.empty())
      text += ' ';
    text += words[pick(rng)];
  }
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

const std::vector<std::string_view>& prompt_words() {
  return words;
}

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

std::vector<bench_request> build_workload(const workload_options& o) {
  validate(o);
  auto lengths = engine_for(o.seed, stream::lengths);
  auto word_rng = engine_for(o.seed, stream::words);
  auto priority_rng = engine_for(o.seed, stream::priorities);

  // The prefix is the same text in every prompt, so the server can share its KV blocks.
  std::string prefix;
  auto prefix_rng = engine_for(o.prefix_seed.value_or(o.seed), stream::prefix);
  append_words(prefix, o.shared_prefix_len, prefix_rng);

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
    r.prompt = prefix;
    append_words(r.prompt, unique, word_rng);
    r.prompt_len = o.shared_prefix_len + unique;
    if (!o.priority_mix.empty()) {
      r.priority = o.priority_mix[pick_priority(priority_rng)].priority;
      r.has_priority = true;
    }
  }
  return requests;
}

} // namespace troupe::bench
