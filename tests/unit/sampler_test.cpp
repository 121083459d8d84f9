// The sampler: greedy is argmax, seeded draws are reproducible and follow the
// distribution, top-k/top-p/min-p cut where they should, penalties move logits
// as OpenAI and vLLM define them, bad parameters are rejected by name.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <vector>

#include "runtime/errors.hpp"
#include "runtime/sampler.hpp"

using namespace troupe::runtime;

namespace {
std::vector<float> logits_of(std::initializer_list<float> values) {
  return std::vector<float>(values);
}

std::map<token_id, int> histogram(const std::vector<float>& logits, const sampling_params& p, int draws,
                                  std::uint64_t seed = 42) {
  sampler s;
  std::map<token_id, int> counts;
  for (int i = 0; i < draws; ++i) {
    auto row = logits;
    ++counts[s.sample(row, p, {}, {}, seed, static_cast<std::uint64_t>(i))];
  }
  return counts;
}
} // namespace

TEST_CASE("greedy picks the largest logit, the lowest id on ties") {
  sampler s;
  sampling_params p;
  p.temperature = 0.0f;
  auto row = logits_of({0.1f, 3.0f, -1.0f, 3.0f});
  CHECK(s.sample(row, p, {}, {}, 0, 0) == 1);
}

TEST_CASE("the same seed and step give the same token, whatever was sampled before") {
  auto logits = logits_of({1.0f, 1.2f, 0.9f, 1.1f, 0.5f});
  sampling_params p;
  sampler a, b;
  for (std::uint64_t step = 0; step < 50; ++step) {
    auto r1 = logits, r2 = logits;
    CHECK(a.sample(r1, p, {}, {}, 7, step) == b.sample(r2, p, {}, {}, 7, step));
  }
  // Different seeds give a different stream.
  int differ = 0;
  for (std::uint64_t step = 0; step < 50; ++step) {
    auto r1 = logits, r2 = logits;
    differ += a.sample(r1, p, {}, {}, 7, step) != b.sample(r2, p, {}, {}, 8, step);
  }
  CHECK(differ > 10);
}

TEST_CASE("temperature sampling follows softmax(logits / T)") {
  auto logits = logits_of({0.0f, std::log(2.0f), std::log(5.0f)}); // probabilities 1/8, 2/8, 5/8
  sampling_params p;
  p.temperature = 1.0f;
  const int draws = 40000;
  auto counts = histogram(logits, p, draws);
  CHECK(counts[0] / double(draws) == doctest::Approx(0.125).epsilon(0.1));
  CHECK(counts[1] / double(draws) == doctest::Approx(0.25).epsilon(0.05));
  CHECK(counts[2] / double(draws) == doctest::Approx(0.625).epsilon(0.03));
  // At T = 0.5 the probabilities are proportional to 1, 4, 25.
  p.temperature = 0.5f;
  counts = histogram(logits, p, draws);
  CHECK(counts[2] / double(draws) == doctest::Approx(25.0 / 30.0).epsilon(0.03));
}

TEST_CASE("top-k keeps only the k most likely tokens") {
  auto logits = logits_of({0.0f, 1.0f, 2.0f, 3.0f, 4.0f});
  sampling_params p;
  p.top_k = 2;
  auto counts = histogram(logits, p, 2000);
  for (auto [id, n] : counts)
    CHECK((id == 3 || id == 4));
  CHECK(counts.size() == 2);
}

TEST_CASE("top-p keeps the smallest set whose mass reaches p") {
  // probabilities 0.5, 0.3, 0.15, 0.05
  auto logits = logits_of({std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)});
  sampling_params p;
  p.top_p = 0.75f; // 0.5 < 0.75 <= 0.8: keeps ids 0 and 1
  auto counts = histogram(logits, p, 4000);
  CHECK(counts.size() == 2);
  CHECK(counts.count(0) == 1);
  CHECK(counts.count(1) == 1);
  CHECK(counts[0] / 4000.0 == doctest::Approx(0.5 / 0.8).epsilon(0.05));
}

TEST_CASE("min-p drops tokens below min_p times the top probability") {
  auto logits = logits_of({std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)});
  sampling_params p;
  p.min_p = 0.35f; // threshold 0.175: keeps 0.5 and 0.3
  auto counts = histogram(logits, p, 4000);
  CHECK(counts.size() == 2);
  CHECK(counts.count(2) == 0);
}

TEST_CASE("repetition penalty divides positive and multiplies negative logits of seen tokens, once") {
  sampler s;
  sampling_params p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  // Token 0 (logit 3) was seen twice: 3/2 = 1.5 < 2 -> token 1 wins. Token 2 (negative) gets more negative.
  auto row = logits_of({3.0f, 2.0f, -1.0f});
  std::vector<token_id> context{0, 0, 2};
  CHECK(s.sample(row, p, context, {}, 0, 0) == 1);
  CHECK(row[0] == doctest::Approx(1.5f));
  CHECK(row[2] == doctest::Approx(-2.0f));
}

TEST_CASE("logit edits: bias is added and banned ids are cut before the penalties") {
  sampler s;
  sampling_params p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  // Token 2 (logit 1) gets +4 -> 5, then the repetition penalty (it was seen) halves it: 2.5 beats 2.
  const std::vector<troupe::token_bias> bias{{2, 4.0f}, {0, -1.0f}};
  const std::vector<token_id> banned{};
  auto row = logits_of({3.0f, 2.0f, 1.0f});
  std::vector<token_id> context{2};
  CHECK(s.sample(row, p, context, {}, 0, 0, {bias, banned}) == 2);
  CHECK(row[2] == 2.5f);
  CHECK(row[0] == 2.0f);
  // The argmax banned: the next one wins, and the banned id has no mass at any temperature.
  const std::vector<token_id> ban{0};
  row = logits_of({3.0f, 2.0f, 1.0f});
  CHECK(s.sample(row, p, {}, {}, 0, 0, {{}, ban}) == 1);
  CHECK(std::isinf(row[0]));
  CHECK(row[0] < 0);
  p.temperature = 1.0f;
  p.repetition_penalty = 1.0f;
  std::vector<float> probs(3);
  row = logits_of({3.0f, 2.0f, 1.0f});
  s.probabilities(row, p, {}, {}, probs, {{}, ban});
  CHECK(probs[0] == 0.0f);
  CHECK(probs[1] + probs[2] == doctest::Approx(1.0));
  for (std::uint64_t step = 0; step < 200; ++step) {
    row = logits_of({3.0f, 2.0f, 1.0f});
    CHECK(s.sample(row, p, {}, {}, 5, step, {{}, ban}) != 0);
  }
}

TEST_CASE("logit_rules: the bias always, the stop ids banned only while the output is shorter than min_tokens") {
  sampling_params p;
  p.logit_bias = {{9, 1.0f}, {4, -2.0f}};
  p.min_tokens = 2;
  const std::vector<token_id> stops{7, 2, 7};
  const auto rules = logit_rules_for(p, stops);
  CHECK(rules.bias == std::vector<troupe::token_bias>{{4, -2.0f}, {9, 1.0f}}); // by id
  CHECK(rules.stop_ids == std::vector<token_id>{2, 7});                        // sorted, once each
  CHECK_FALSE(rules.empty());
  for (std::uint64_t i : {0u, 1u}) {
    const auto e = rules.at(i);
    CHECK(e.bias.size() == 2);
    CHECK(e.banned.size() == 2);
  }
  CHECK(rules.at(2).banned.empty());
  CHECK(rules.at(2).bias.size() == 2);
  // Without min_tokens the stop ids are not kept; without bias either, nothing is left.
  p.min_tokens = 0;
  CHECK(logit_rules_for(p, stops).stop_ids.empty());
  p.logit_bias.clear();
  CHECK(logit_rules_for(p, stops).empty());
  CHECK(logit_rules_for(p, stops).at(0).empty());
  // Ids outside the row are ignored, as the device ignores them.
  std::vector<float> row{1.0f, 1.0f};
  const std::vector<troupe::token_bias> far{{5, 3.0f}, {1, 0.5f}};
  const std::vector<token_id> far_ban{9};
  apply_logit_edits(row, {far, far_ban});
  CHECK(row == std::vector<float>{1.0f, 1.5f});
}

TEST_CASE("frequency and presence penalties subtract per output occurrence") {
  sampler s;
  sampling_params p;
  p.temperature = 0.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  auto row = logits_of({3.0f, 2.0f, 1.0f});
  std::vector<token_id> output{0, 0, 1};
  s.sample(row, p, output, output, 0, 0);
  CHECK(row[0] == doctest::Approx(3.0f - 2 * 0.5f - 0.25f));
  CHECK(row[1] == doctest::Approx(2.0f - 0.5f - 0.25f));
  CHECK(row[2] == doctest::Approx(1.0f));
}

TEST_CASE("out-of-range sampling parameters are rejected with the parameter's name") {
  auto rejects = [](auto mutate, const char* name) {
    sampling_params p;
    mutate(p);
    try {
      p.validate();
      FAIL("accepted a bad " << name);
    } catch (const invalid_argument_error& e) {
      CHECK(std::string(e.what()).find(name) != std::string::npos);
    }
  };
  rejects([](sampling_params& p) { p.temperature = -1; }, "temperature");
  rejects([](sampling_params& p) { p.temperature = NAN; }, "temperature");
  rejects([](sampling_params& p) { p.top_p = 0; }, "top_p");
  rejects([](sampling_params& p) { p.top_p = 1.5f; }, "top_p");
  rejects([](sampling_params& p) { p.top_k = -2; }, "top_k");
  rejects([](sampling_params& p) { p.min_p = 2; }, "min_p");
  rejects([](sampling_params& p) { p.repetition_penalty = 0; }, "repetition_penalty");
  rejects([](sampling_params& p) { p.frequency_penalty = 3; }, "frequency_penalty");
  rejects([](sampling_params& p) { p.presence_penalty = -3; }, "presence_penalty");
  rejects([](sampling_params& p) { p.max_tokens = 0; }, "max_tokens");
  rejects([](sampling_params& p) { p.stop = {""}; }, "stop");
  sampling_params ok;
  CHECK_NOTHROW(ok.validate());
}

TEST_CASE("counter_uniform draws lie in the unit interval and are roughly uniform") {
  double sum = 0;
  for (std::uint64_t i = 0; i < 10000; ++i) {
    double u = counter_uniform(123, i);
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    sum += u;
  }
  CHECK(sum / 10000 == doctest::Approx(0.5).epsilon(0.02));
}
