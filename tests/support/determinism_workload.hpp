// The workload of the engine.deterministic tests (CPU actors, GPU engine): twelve requests,
// six greedy and six seeded, with logprobs and penalties, and other traffic to mix them with;
// and the bit-for-bit comparison of two outcomes of the same request.
#pragma once

#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/engine_harness.hpp"

namespace troupe::testing {

// BOS, then n - 1 story tokens starting `offset` tokens into the golden stories: prompts
// that start alike share cached blocks, prompts at other offsets do not.
inline std::vector<token_id> story_prompt_at(std::size_t offset, std::size_t n) {
  auto ids = story_prompt(n + offset);
  ids.erase(ids.begin() + 1, ids.begin() + 1 + static_cast<std::ptrdiff_t>(offset));
  return ids;
}

// Six greedy and six seeded requests (temperature, top-k, top-p, penalties), every one asking
// for logprobs top-3; prompts of 9..120 tokens, three of them sharing their first 48.
inline std::vector<request_spec> determinism_requests() {
  const std::size_t offsets[] = {0, 0, 0, 37, 91, 150, 7, 211, 64, 300, 5, 260};
  const std::size_t lengths[] = {60, 75, 120, 9, 33, 48, 101, 17, 64, 90, 26, 55};
  std::vector<request_spec> specs;
  for (int i = 0; i < 12; ++i) {
    request_spec s;
    s.prompt_ids = story_prompt_at(offsets[i], lengths[i]);
    s.params.max_tokens = 16 + 3 * (i % 5);
    s.params.ignore_eos = true;
    s.params.logprobs = 3;
    if (i % 2 == 0) {
      s.params.temperature = 0.0f;
    } else {
      s.params.temperature = 0.7f + 0.1f * static_cast<float>(i % 4);
      s.params.seed = 1000 + static_cast<std::uint64_t>(i);
      s.params.top_k = i % 3 == 0 ? 40 : 0;
      s.params.top_p = i % 4 == 1 ? 0.9f : 1.0f;
    }
    if (i % 3 == 1) {
      s.params.frequency_penalty = 0.4f;
      s.params.presence_penalty = 0.3f;
    }
    if (i % 4 == 2)
      s.params.repetition_penalty = 1.2f;
    specs.push_back(std::move(s));
  }
  return specs;
}

// Traffic to mix them with: long prompts (chunked under a small token budget), unseeded
// sampling, two choices.
inline std::vector<request_spec> other_traffic() {
  std::vector<request_spec> specs;
  for (int i = 0; i < 8; ++i) {
    request_spec s;
    s.prompt_ids = story_prompt_at(static_cast<std::size_t>(13 * i), 40 + static_cast<std::size_t>(17 * i));
    s.params.max_tokens = 10 + 4 * i;
    s.params.ignore_eos = true;
    s.params.temperature = 1.0f;
    s.params.n = i % 4 == 3 ? 2 : 1;
    specs.push_back(std::move(s));
  }
  return specs;
}

// The requests interleaved with other_traffic(), one of the others sent before each of the first
// ones: the requests land at other rows, their prompts at other chunk boundaries.
inline std::vector<request_spec> mixed_with_other_traffic(const std::vector<request_spec>& specs) {
  const auto others = other_traffic();
  std::vector<request_spec> mixed;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (i < others.size())
      mixed.push_back(others[i]);
    mixed.push_back(specs[i]);
  }
  return mixed;
}

// The outcomes of a run of mixed_with_other_traffic(specs), split back: the requests' in their
// order, and the other traffic's.
struct mixed_outcomes {
  std::vector<request_outcome> requests, others;
};
inline mixed_outcomes split_mixed(const std::vector<request_outcome>& out, std::size_t requests) {
  const std::size_t others = other_traffic().size();
  mixed_outcomes split;
  for (std::size_t i = 0, j = 0; i < requests; ++i) {
    if (i < others)
      split.others.push_back(out[j++]);
    split.requests.push_back(out[j++]);
  }
  return split;
}

// "" when a and b carry the same tokens, text and logprobs (the chosen token's and the top
// alternatives', ids and float bits); otherwise where they first differ.
inline std::string first_difference(const request_outcome& a, const request_outcome& b) {
  std::ostringstream why;
  if (!a.finished || !b.finished)
    return "a request did not finish: " + a.error.message + b.error.message;
  if (a.token_ids != b.token_ids) {
    std::size_t i = 0;
    while (i < a.token_ids.size() && i < b.token_ids.size() && a.token_ids[i] == b.token_ids[i])
      ++i;
    why << "tokens differ at " << i << " of " << a.token_ids.size() << " / " << b.token_ids.size();
    return why.str();
  }
  if (a.text != b.text)
    return "texts differ";
  if (a.logprobs.size() != b.logprobs.size())
    return "logprob counts differ";
  auto same_float = [](float x, float y) { return std::memcmp(&x, &y, sizeof x) == 0; };
  for (std::size_t i = 0; i < a.logprobs.size(); ++i) {
    const auto &x = a.logprobs[i], &y = b.logprobs[i];
    bool same = x.id == y.id && same_float(x.logprob, y.logprob) && x.top.size() == y.top.size();
    for (std::size_t k = 0; same && k < x.top.size(); ++k)
      same = x.top[k].id == y.top[k].id && same_float(x.top[k].logprob, y.top[k].logprob);
    if (!same) {
      why.precision(9);
      why << "logprobs differ at token " << i << ": " << x.logprob << " / " << y.logprob;
      return why.str();
    }
  }
  return "";
}

} // namespace troupe::testing
