// The row a device sampler gets carries the host sampler's draw for the same (seed, step),
// the penalties with the sequence's history, and the logprobs asked for; sample_on_host, the
// device's reference, gives the host sampler's tokens and compute_logprobs' values.
#include <doctest/doctest.h>

#include "runtime/device_sampling.hpp"
#include "runtime/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

using namespace troupe::runtime;

namespace {
// Temperature and every cut set.
sampling_params with_cuts() {
  sampling_params p;
  p.temperature = 0.7f;
  p.top_k = 20;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  return p;
}
} // namespace

TEST_CASE("make_device_sample: the parameters, and u = counter_uniform(seed, step) unless greedy") {
  auto p = with_cuts();
  const auto s = make_device_sample(p, 1234, 17);
  CHECK(s.temperature == 0.7f);
  CHECK(s.top_k == 20);
  CHECK(s.top_p == 0.9f);
  CHECK(s.min_p == 0.05f);
  CHECK(s.u == counter_uniform(1234, 17));
  CHECK(s.u != counter_uniform(1234, 18));
  p.temperature = 0.0f;
  CHECK(make_device_sample(p, 1234, 17).u == 0.0);
}

TEST_CASE("make_device_sample: penalties carry the history and prompt length, logprobs pass through") {
  auto p = with_cuts();
  const std::vector<token_id> history{5, 6, 7, 5};
  auto plain = make_device_sample(p, 1, 2, history, 3);
  CHECK_FALSE(plain.penalised());
  CHECK(plain.history.empty()); // nothing reads it
  CHECK(plain.logprobs == -1);
  p.frequency_penalty = 0.5f;
  p.logprobs = 4;
  auto penalised = make_device_sample(p, 1, 2, history, 3);
  CHECK(penalised.penalised());
  CHECK(penalised.frequency_penalty == 0.5f);
  CHECK(penalised.history.size() == 4);
  CHECK(penalised.prompt_len == 3);
  CHECK(penalised.logprobs == 4);
}

TEST_CASE("sample_on_host: the host sampler's tokens with penalties over the history, and raw logprobs") {
  const int vocab = 50;
  std::vector<float> logits(3 * vocab);
  for (std::size_t i = 0; i < logits.size(); ++i)
    logits[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * 3.0);
  // The first row's argmax is in the output twice: the penalties must move the greedy token.
  const auto first = std::span<const float>(logits).first(vocab);
  const auto raw_argmax = static_cast<token_id>(std::max_element(first.begin(), first.end()) - first.begin());
  const std::vector<token_id> history{1, 2, 3, 4, raw_argmax, 9, raw_argmax, 9};
  sampling_params greedy_penalised;
  greedy_penalised.temperature = 0.0f;
  greedy_penalised.repetition_penalty = 2.0f;
  greedy_penalised.frequency_penalty = 1.0f;
  auto seeded = with_cuts();
  seeded.presence_penalty = 0.7f;
  seeded.logprobs = 3;
  sampling_params plain;
  plain.temperature = 1.0f;
  plain.logprobs = 0;
  const std::vector<sampling_params> params{greedy_penalised, seeded, plain};
  std::vector<device_sample> rows;
  for (std::size_t i = 0; i < params.size(); ++i)
    rows.push_back(make_device_sample(params[i], 77, i, history, 4));
  auto device_logits = logits;
  std::vector<token_id> tokens(3);
  std::vector<token_logprobs> logprobs(3);
  sample_on_host(device_logits, vocab, rows, tokens, logprobs);
  sampler s;
  for (std::size_t i = 0; i < params.size(); ++i) {
    CAPTURE(i);
    std::vector<float> row(logits.begin() + i * vocab, logits.begin() + (i + 1) * vocab);
    const auto raw = row;
    const std::span<const token_id> context(history), output = context.subspan(4);
    CHECK(tokens[i] == s.sample(row, params[i], context, output, 77, i));
    if (params[i].logprobs >= 0) {
      const auto expected = compute_logprobs(raw, tokens[i], params[i].logprobs);
      CHECK(logprobs[i].token == tokens[i]);
      CHECK(logprobs[i].logprob == expected.logprob);
      CHECK(logprobs[i].top_ids == expected.top_ids);
    } else {
      CHECK(logprobs[i].token == -1); // untouched
    }
  }
  CHECK(tokens[0] != raw_argmax);
}

TEST_CASE("sample_on_host: a prompt row draws nothing, its token is the prompt token, scored on the raw logits") {
  const int vocab = 64;
  std::vector<float> logits(2 * vocab);
  for (int i = 0; i < 2 * vocab; ++i)
    logits[static_cast<std::size_t>(i)] = std::sin(0.37f * static_cast<float>(i)) * 4.0f;
  const auto raw = logits;
  std::vector<device_sample> rows{make_device_score(5, 3), make_device_score(63, 0)};
  CHECK(rows[0].score_target == 5);
  CHECK(rows[0].logprobs == 3);
  CHECK_FALSE(rows[0].edited());
  std::vector<token_id> tokens(2, -1);
  std::vector<token_logprobs> logprobs(2);
  sample_on_host(logits, vocab, rows, tokens, logprobs);
  CHECK(tokens == std::vector<token_id>{5, 63});
  for (std::size_t r = 0; r < 2; ++r) {
    const auto expected =
        compute_logprobs(std::span<const float>(raw).subspan(r * vocab, vocab), tokens[r], rows[r].logprobs);
    CHECK(logprobs[r].token == tokens[r]);
    CHECK(logprobs[r].logprob == expected.logprob);
    CHECK(logprobs[r].top_ids == expected.top_ids);
  }
  CHECK(logprobs[0].top_ids.size() == 3);
  CHECK(logprobs[1].top_ids.empty());
}
