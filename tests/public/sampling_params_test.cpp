// sampling_params::validate, the one statement of the sampling ranges that the engine
// and the server both apply: each bad value names its field (the param of a 400) and
// says the range and the value as the client wrote it; the defaults pass.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "troupe/errors.hpp"
#include "troupe/sampling_params.hpp"

using troupe::sampling_params;

namespace {
struct bad_case {
  std::function<void(sampling_params&)> mutate;
  std::string param, message;
};
} // namespace

TEST_CASE("each value out of range is refused with its field and a message that says the range") {
  const std::vector<bad_case> cases = {
      {[](auto& p) { p.temperature = 2.5f; }, "temperature", "temperature must be in [0, 2], got 2.5"},
      {[](auto& p) { p.temperature = -0.1f; }, "temperature", "temperature must be in [0, 2], got -0.1"},
      {[](auto& p) { p.temperature = NAN; }, "temperature", "temperature must be in [0, 2], got nan"},
      {[](auto& p) { p.top_p = 0.0f; }, "top_p", "top_p must be in (0, 1], got 0"},
      {[](auto& p) { p.top_p = 1.5f; }, "top_p", "top_p must be in (0, 1], got 1.5"},
      {[](auto& p) { p.top_k = -2; }, "top_k", "top_k must be -1, 0 (off) or positive, got -2"},
      {[](auto& p) { p.min_p = 1.01f; }, "min_p", "min_p must be in [0, 1], got 1.01"},
      {[](auto& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty", "repetition_penalty must be > 0, got 0"},
      {[](auto& p) { p.frequency_penalty = 2.5f; }, "frequency_penalty",
       "frequency_penalty must be in [-2, 2], got 2.5"},
      {[](auto& p) { p.presence_penalty = -3.0f; }, "presence_penalty", "presence_penalty must be in [-2, 2], got -3"},
      {[](auto& p) { p.max_tokens = 0; }, "max_tokens", "max_tokens must be at least 1, got 0"},
      {[](auto& p) { p.logprobs = 21; }, "logprobs", "logprobs must be in [0, 20], got 21"},
      {[](auto& p) { p.prompt_logprobs = -2; }, "prompt_logprobs", "prompt_logprobs must be in [0, 20], got -2"},
      {[](auto& p) {
         p.stop = {"ok", ""};
       },
       "stop", "stop strings must not be empty"},
      {[](auto& p) {
         p.stop_token_ids = {2, -1};
       },
       "stop_token_ids", "stop_token_ids must be token ids >= 0, got -1"},
      {[](auto& p) { p.min_tokens = -1; }, "min_tokens", "min_tokens must be in [0, max_tokens = 16], got -1"},
      {[](auto& p) { p.min_tokens = 17; }, "min_tokens", "min_tokens must be in [0, max_tokens = 16], got 17"},
      {[](auto& p) {
         p.logit_bias = {{5, 100.5f}};
       },
       "logit_bias", "logit_bias values must be in [-100, 100], got 100.5 for token 5"},
      {[](auto& p) {
         p.logit_bias = {{5, NAN}};
       },
       "logit_bias", "logit_bias values must be in [-100, 100], got nan for token 5"},
      {[](auto& p) {
         p.logit_bias = {{-3, 1.0f}};
       },
       "logit_bias", "logit_bias keys must be token ids >= 0, got -3"},
      {[](auto& p) {
         p.logit_bias = {{9, 1.0f}, {4, 2.0f}, {9, -1.0f}};
       },
       "logit_bias", "logit_bias names token 9 twice"},
      {[](auto& p) {
         for (int i = 0; i < 301; ++i)
           p.logit_bias.push_back({i, 1.0f});
       },
       "logit_bias", "logit_bias may have at most 300 entries, got 301"},
      {[](auto& p) { p.n = 0; }, "n", "n must be in [1, 128], got 0"},
      {[](auto& p) { p.n = 129; }, "n", "n must be in [1, 128], got 129"},
      {[](auto& p) {
         p.n = 3;
         p.best_of = 2;
       },
       "best_of", "best_of must be in [n = 3, 128], got 2"},
      {[](auto& p) { p.best_of = 129; }, "best_of", "best_of must be in [n = 1, 128], got 129"},
  };
  for (const auto& c : cases) {
    INFO(c.message);
    sampling_params p;
    c.mutate(p);
    try {
      p.validate();
      FAIL("accepted");
    } catch (const troupe::invalid_argument_error& e) {
      CHECK(e.param == c.param);
      CHECK(std::string(e.what()) == c.message);
    }
  }
}

TEST_CASE("the defaults and the ends of each range pass") {
  sampling_params p;
  CHECK(p.max_tokens == troupe::default_max_tokens);
  CHECK_NOTHROW(p.validate());
  p.temperature = troupe::max_temperature;
  p.top_p = 1.0f;
  p.top_k = -1;
  p.min_p = 1.0f;
  p.frequency_penalty = -2.0f;
  p.presence_penalty = 2.0f;
  p.logprobs = troupe::max_logprobs;
  p.prompt_logprobs = 0;
  p.stop_token_ids = {0};
  CHECK_NOTHROW(p.validate());
  CHECK(p.choices() == 1);
  p.n = troupe::max_choices;
  CHECK_NOTHROW(p.validate());
  CHECK(p.choices() == troupe::max_choices);
  p.n = 2;
  p.best_of = 5;
  CHECK_NOTHROW(p.validate());
  CHECK(p.choices() == 5);
  p.temperature = 0.0f;
  CHECK(p.greedy());
  CHECK_NOTHROW(p.validate());
}
