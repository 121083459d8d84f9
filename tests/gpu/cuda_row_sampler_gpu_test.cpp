// The CUDA runner's sampler (logit_bias, banned ids, penalties, the draw, log-probabilities
// on the device) against
// its reference, runtime::sample_on_host, on random rows at the 13B's and the 8B's vocabulary
// sizes: greedy rows give the host's token, seeded rows the host's draw (or one at a boundary
// of u: host_would_draw), penalised rows see the history the host sees, and log-probabilities
// agree within 1e-4 with the same top ids. Scratch rows of the logits buffer start poisoned, and a second launch
// on the same buffer (its scratch rows left as the first left them) gives the same results.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "runtime/cuda/cuda_row_sampler.hpp"
#include "runtime/sampler.hpp"
#include "tests/gpu/gpu_test_support.hpp"
#include "tests/gpu/host_draw_check.hpp"

using namespace troupe::testing::gpu;
namespace rt = troupe::runtime;
using rt::token_id;

namespace {

struct row_case {
  rt::sampler_settings params;
  int prompt_len = 0;
  std::vector<token_id> history;
  std::vector<rt::token_bias> bias; // distinct ids
  std::vector<token_id> banned;     // distinct ids; the row's argmax joins them when ban_argmax
  bool ban_argmax = false;
};

// Row 13 asks for `deepest` alternatives, no row for more (the most picks the kernel's list length).
std::vector<row_case> cases(int vocab, int deepest, std::mt19937& rng) {
  std::uniform_int_distribution<int> any(0, vocab - 1), few(0, 40);
  auto history = [&](int n) {
    std::vector<token_id> h(static_cast<std::size_t>(n));
    for (auto& t : h)
      t = few(rng) < 20 ? few(rng) : any(rng); // repeats among 0..40, and strays
    return h;
  };
  std::vector<row_case> out;
  for (int i = 0; i < 16; ++i) {
    row_case c;
    c.params.temperature = i % 4 == 0 ? 0.0f : 0.7f + 0.1f * static_cast<float>(i % 3);
    c.params.top_k = i % 5 == 1 ? 50 : 0;
    c.params.top_p = i % 3 == 2 ? 0.9f : 1.0f;
    if (i % 2 == 0)
      c.params.repetition_penalty = 1.3f;
    if (i % 3 == 0)
      c.params.frequency_penalty = 0.6f;
    if (i % 5 == 0)
      c.params.presence_penalty = -0.4f;
    c.params.logprobs = i == 13 ? deepest : i % 4 == 3 ? -1 : std::min(i % 7, deepest); // most rows
    c.history = history(i == 5 ? 3000 : 20 + 37 * i);
    c.prompt_len = static_cast<int>(c.history.size()) / (i % 3 + 1);
    // logit_bias on rows 1, 5, 9, 13 (rows 1 and 13 have no penalties: edits alone), with ids
    // among the penalised ones; bans on rows 3, 7, 11, 15, one of them biased too; row 4
    // (greedy) forced by a +100 bias, row 8 (greedy) with its argmax banned.
    if (i % 4 == 1)
      for (int t = 0; t < 60; t += 2)
        c.bias.push_back({t * 7 % vocab, static_cast<float>((t * 37) % 201 - 100)});
    if (i % 4 == 3) {
      c.banned = {3, 11, vocab - 1};
      c.bias.push_back({11, 50.0f});
    }
    if (i == 4)
      c.bias.push_back({vocab / 2 + 1, 100.0f});
    c.ban_argmax = i == 8 || i == 15;
    out.push_back(std::move(c));
  }
  return out;
}

void run_case(int vocab, int deepest) {
  CAPTURE(vocab);
  CAPTURE(deepest);
  std::mt19937 rng(1234u + static_cast<unsigned>(vocab));
  auto rows_in = cases(vocab, deepest, rng);
  const std::size_t n = rows_in.size(), v = static_cast<std::size_t>(vocab);
  std::vector<float> logits = random_values(n * v, rng, 3.0f);
  // A few logits past the penalties' reach, and negative ones among the repeated ids.
  for (std::size_t r = 0; r < n; ++r)
    for (int t = 0; t < 40; t += 3)
      logits[r * v + static_cast<std::size_t>(t)] = -std::abs(logits[r * v + static_cast<std::size_t>(t)]);
  for (std::size_t r = 0; r < n; ++r)
    if (rows_in[r].ban_argmax) {
      const auto row = std::span<const float>(logits).subspan(r * v, v);
      rows_in[r].banned.push_back(static_cast<token_id>(std::max_element(row.begin(), row.end()) - row.begin()));
    }

  std::vector<rt::device_sample> rows;
  for (std::size_t r = 0; r < n; ++r) {
    const auto& c = rows_in[r];
    rows.push_back(rt::make_device_sample(c.params, 99, r, c.history, c.prompt_len, {c.bias, c.banned}));
  }
  const std::size_t needed = rt::cuda_row_sampler::logits_rows_needed(rows);
  REQUIRE(needed > n);
  auto device_logits = poisoned<float>(needed * v);
  REQUIRE(cudaMemcpy(device_logits.data(), logits.data(), n * v * sizeof(float), cudaMemcpyHostToDevice) ==
          cudaSuccess);

  rt::cuda_row_sampler sampler(4); // grows to the step
  rt::cuda_step_status status;
  sampler.launch(device_logits.data(), vocab, rows, nullptr, status);
  REQUIRE(status.ok());
  sync_or_fail();
  std::vector<token_id> tokens(n, -1);
  std::vector<rt::token_logprobs> logprobs(n);
  sampler.collect(rows, tokens, logprobs);

  // Again on the same buffer: the scratch rows now hold the first launch's counts and copies,
  // and the penalised rows their penalties; the rows restored, nothing may differ.
  REQUIRE(cudaMemcpy(device_logits.data(), logits.data(), n * v * sizeof(float), cudaMemcpyHostToDevice) ==
          cudaSuccess);
  sampler.launch(device_logits.data(), vocab, rows, nullptr, status);
  REQUIRE(status.ok());
  sync_or_fail();
  std::vector<token_id> again(n, -1);
  std::vector<rt::token_logprobs> again_logprobs(n);
  sampler.collect(rows, again, again_logprobs);
  CHECK(again == tokens);
  for (std::size_t r = 0; r < n; ++r) {
    CHECK(again_logprobs[r].logprob == logprobs[r].logprob);
    CHECK(again_logprobs[r].top_ids == logprobs[r].top_ids);
  }

  std::vector<token_id> host_tokens(n);
  std::vector<rt::token_logprobs> host_logprobs(n);
  auto host_logits = logits;
  rt::sample_on_host(host_logits, vocab, rows, host_tokens, host_logprobs);

  int at_boundary = 0;
  for (std::size_t r = 0; r < n; ++r) {
    CAPTURE(r);
    const auto& c = rows_in[r];
    REQUIRE(tokens[r] >= 0);
    REQUIRE(tokens[r] < vocab);
    const std::span<const token_id> context(c.history);
    const auto output = context.subspan(static_cast<std::size_t>(c.prompt_len));
    if (c.params.greedy())
      CHECK(tokens[r] == host_tokens[r]);
    else if (!host_would_draw(std::span<const float>(logits).subspan(r * v, v), c.params, rows[r].u, tokens[r], context,
                              output, rows[r].edits))
      ++at_boundary;
    for (auto banned : c.banned)
      CHECK(tokens[r] != banned);
    if (r == 4)
      CHECK(tokens[r] == vocab / 2 + 1); // +100 wins every greedy draw
    if (c.params.logprobs < 0) {
      CHECK(logprobs[r].token == -1);
      continue;
    }
    // Against the raw logits, for the token the GPU drew.
    const auto expected =
        rt::compute_logprobs(std::span<const float>(logits).subspan(r * v, v), tokens[r], c.params.logprobs);
    CHECK(logprobs[r].token == tokens[r]);
    CHECK(std::abs(logprobs[r].logprob - expected.logprob) <= 1e-4f);
    CHECK(logprobs[r].top_ids == expected.top_ids);
    REQUIRE(logprobs[r].top_logprobs.size() == expected.top_logprobs.size());
    for (std::size_t k = 0; k < expected.top_logprobs.size(); ++k)
      CHECK(std::abs(logprobs[r].top_logprobs[k] - expected.top_logprobs[k]) <= 1e-4f);
  }
  CHECK(at_boundary <= 1);
}

} // namespace

TEST_CASE("cuda row sampler: penalties, draws and logprobs equal the host's on 32,000-token rows") {
  for (int deepest : {1, 3, 6, 20}) // each length of the log-probability kernel's lists
    run_case(32000, deepest);
}

TEST_CASE("cuda row sampler: penalties, draws and logprobs equal the host's on 128,256-token rows") {
  for (int deepest : {6, 20})
    run_case(128256, deepest);
}

TEST_CASE("cuda row sampler: prompt rows between sampled ones keep their target and score it as the host does") {
  const int vocab = 32000;
  const std::size_t v = vocab;
  std::mt19937 rng(77u);
  std::vector<float> logits = random_values(6 * v, rng, 3.0f);
  rt::sampler_settings sampled_params;
  sampled_params.temperature = 0.8f;
  sampled_params.top_p = 0.9f;
  sampled_params.logprobs = 2;
  sampled_params.repetition_penalty = 1.2f;
  const std::vector<token_id> history{5, 6, 7, 5};
  std::vector<rt::device_sample> rows{rt::make_device_score(17, 5),
                                      rt::make_device_sample(sampled_params, 3, 0, history, 2),
                                      rt::make_device_score(vocab - 1, 0),
                                      rt::make_device_score(0, 20),
                                      rt::make_device_sample(sampled_params, 3, 1, history, 2),
                                      rt::make_device_score(31999, 1)};
  auto device_logits = poisoned<float>(rt::cuda_row_sampler::logits_rows_needed(rows) * v);
  REQUIRE(cudaMemcpy(device_logits.data(), logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice) ==
          cudaSuccess);
  rt::cuda_row_sampler sampler(2);
  rt::cuda_step_status status;
  sampler.launch(device_logits.data(), vocab, rows, nullptr, status);
  REQUIRE(status.ok());
  sync_or_fail();
  std::vector<token_id> tokens(rows.size(), -1);
  std::vector<rt::token_logprobs> logprobs(rows.size());
  sampler.collect(rows, tokens, logprobs);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    CAPTURE(r);
    REQUIRE(tokens[r] >= 0);
    if (rows[r].score_target >= 0)
      CHECK(tokens[r] == rows[r].score_target);
    const auto expected =
        rt::compute_logprobs(std::span<const float>(logits).subspan(r * v, v), tokens[r], rows[r].logprobs);
    CHECK(logprobs[r].token == tokens[r]);
    CHECK(std::abs(logprobs[r].logprob - expected.logprob) <= 1e-4f);
    CHECK(logprobs[r].top_ids == expected.top_ids);
  }
}
