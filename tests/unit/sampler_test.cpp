// The sampler: greedy is argmax, seeded draws are reproducible and follow the
// distribution, top-k/top-p/min-p cut where they should, penalties move logits
// as OpenAI and vLLM define them, bad parameters are rejected by name.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "runtime/errors.hpp"
#include "runtime/sampler.hpp"
#include "tests/support/sweep.hpp"

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

// --- the ordered sampler against the full sort ------------------------------------------------------------------
// The reference is the sampler as it was before it stopped sorting the whole vocabulary: every id stable-sorted by
// logit (top-k: partial_sort, ties by id), weights and totals in that order, the top-p total over the sorted list.

namespace {
struct reference_set {
  std::vector<token_id> ids;
  std::vector<float> weights;
  double total = 0.0;
};

reference_set reference_candidates(const std::vector<float>& logits, const sampler_settings& p) {
  reference_set out;
  const std::size_t vocab = logits.size();
  std::vector<token_id> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::size_t keep = vocab;
  if (p.top_k > 0 && static_cast<std::size_t>(p.top_k) < vocab) {
    keep = static_cast<std::size_t>(p.top_k);
    std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                      [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  } else {
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  }
  std::vector<float> probs(keep);
  const double inv_t = 1.0 / p.temperature;
  const double max_logit = logits[order[0]];
  double total = 0.0;
  for (std::size_t i = 0; i < keep; ++i) {
    probs[i] = static_cast<float>(std::exp((logits[order[i]] - max_logit) * inv_t));
    total += probs[i];
  }
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    std::size_t cut = keep;
    for (std::size_t i = 0; i < keep; ++i) {
      cum += probs[i] / total;
      if (cum >= p.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
  }
  if (p.min_p > 0.0f) {
    float threshold = p.min_p * probs[0];
    std::size_t cut = 1;
    while (cut < keep && probs[cut] >= threshold)
      ++cut;
    keep = cut;
  }
  out.ids.assign(order.begin(), order.begin() + keep);
  out.weights.assign(probs.begin(), probs.begin() + keep);
  for (std::size_t i = 0; i < keep; ++i)
    out.total += probs[i];
  return out;
}

token_id reference_draw(const reference_set& c, double u) {
  double target = u * c.total;
  double cum = 0.0;
  for (std::size_t i = 0; i < c.ids.size(); ++i) {
    cum += c.weights[i];
    if (target < cum)
      return c.ids[i];
  }
  return c.ids.back();
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// Rows of every shape the ordered path treats differently: noise, a peaked row, many ties, masked (-inf) tokens,
// signed zeros, one value everywhere.
std::vector<float> random_row(std::mt19937& rng, std::size_t vocab, int shape) {
  std::normal_distribution<float> noise(0.0f, shape == 1 ? 4.0f : 1.0f);
  std::uniform_int_distribution<std::size_t> any(0, vocab - 1);
  std::vector<float> row(vocab);
  for (auto& l : row)
    l = noise(rng);
  switch (shape) {
    case 2: // peaked: a few hundred tokens well above the rest
      for (std::size_t j = 0; j < std::min<std::size_t>(300, vocab / 4 + 1); ++j)
        row[any(rng)] += std::uniform_real_distribution<float>(4.0f, 10.0f)(rng);
      break;
    case 3: // ties: a handful of distinct values
      for (auto& l : row)
        l = std::round(l * 2.0f) / 2.0f;
      break;
    case 4: // masked: most tokens at -inf, and ties among the rest
      for (auto& l : row)
        if (any(rng) % 4 != 0)
          l = -std::numeric_limits<float>::infinity();
        else
          l = std::round(l * 4.0f) / 4.0f;
      row[any(rng)] = 1.0f;
      break;
    case 5: // zeros of both signs among negative logits
      for (auto& l : row)
        l = any(rng) % 3 == 0 ? (any(rng) % 2 ? 0.0f : -0.0f) : -std::fabs(l);
      break;
    case 6: // one value everywhere
      std::fill(row.begin(), row.end(), 0.25f);
      break;
    default:
      break;
  }
  return row;
}

std::vector<sampler_settings> settings_for(std::size_t vocab) {
  std::vector<sampler_settings> out;
  auto add = [&](float t, int top_k, float top_p, float min_p) {
    sampler_settings p;
    p.temperature = t;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    out.push_back(p);
  };
  const int v = static_cast<int>(vocab);
  for (float t : {0.8f, 1.0f, 0.3f, 1.7f}) {
    add(t, 0, 1.0f, 0.0f); // plain temperature
    add(t, 0, 0.9f, 0.0f);
    add(t, 0, 0.5f, 0.0f);
    add(t, 0, 0.999f, 0.0f);
    add(t, 0, 1.0f, 0.05f);
    add(t, 0, 1.0f, 0.3f);
    add(t, 50, 1.0f, 0.0f);
    add(t, 1, 1.0f, 0.0f);
    add(t, std::max(1, v - 1), 1.0f, 0.0f);
    add(t, v, 1.0f, 0.0f);
    add(t, v + 3, 0.9f, 0.0f);
    add(t, 50, 0.9f, 0.0f);
    add(t, 50, 0.9f, 0.1f);
    add(t, 0, 0.9f, 0.05f);
    add(t, 7, 0.7f, 0.02f);
  }
  return out;
}

// candidates() (ids, weights, total) and sample() for many seeds, against the full sort, on one row.
void check_against_full_sort(sampler& s, const std::vector<float>& row, const sampler_settings& p, int draws) {
  auto work = row;
  const auto got = s.candidates(work, p, {}, {});
  const auto want = reference_candidates(row, p);
  REQUIRE(got.ids.size() == want.ids.size());
  bool same_ids = true, same_weights = true;
  for (std::size_t i = 0; i < want.ids.size(); ++i) {
    same_ids &= got.ids[i] == want.ids[i];
    same_weights &= same_bits(got.weights[i], want.weights[i]);
  }
  CHECK(same_ids);
  CHECK(same_weights);
  if (p.top_p < 1.0f)
    CHECK(std::fabs(got.total - want.total) <= 1e-12 * want.total);
  else
    CHECK(got.total == want.total);
  int same_tokens = 0;
  for (int d = 0; d < draws; ++d) {
    const auto seed = static_cast<std::uint64_t>(d) * 7919 + 11, step = static_cast<std::uint64_t>(d);
    work = row;
    same_tokens += s.sample(work, p, {}, {}, seed, step) == reference_draw(want, counter_uniform(seed, step));
  }
  CHECK(same_tokens == draws);
}
} // namespace

TEST_CASE("candidates and draws match the full sort: ids, weights, totals and tokens") {
  std::mt19937 rng(2024);
  sampler s; // one sampler throughout: its scratch carries over from row to row
  for (std::size_t vocab : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{1000}, std::size_t{1003}}) {
    for (int shape = 0; shape <= 6; ++shape) {
      const auto row = random_row(rng, vocab, shape);
      for (const auto& p : settings_for(vocab)) {
        CAPTURE(vocab);
        CAPTURE(shape);
        CAPTURE(p.temperature);
        CAPTURE(p.top_k);
        CAPTURE(p.top_p);
        CAPTURE(p.min_p);
        check_against_full_sort(s, row, p, 40);
      }
    }
  }
}

TEST_CASE("candidates and draws match the full sort on a 32000-token vocabulary") {
  std::mt19937 rng(7);
  sampler s;
  const std::size_t vocab = 32000;
  const int rows_per_shape = troupe::testing::sweep_cases(3);
  for (int shape = 0; shape <= 5; ++shape) {
    for (int row_index = 0; row_index < rows_per_shape; ++row_index) {
      const auto row = random_row(rng, vocab, shape);
      const auto settings = settings_for(vocab);
      for (std::size_t k = 0; k < 15; ++k) { // the settings at T = 0.8, one at each other temperature
        const auto& p = settings[k];
        CAPTURE(shape);
        CAPTURE(p.top_k);
        CAPTURE(p.top_p);
        CAPTURE(p.min_p);
        check_against_full_sort(s, row, p, k == 0 ? 200 : 20);
      }
      for (std::size_t k = 15; k < settings.size(); k += 16)
        check_against_full_sort(s, row, settings[k], 20);
    }
  }
}

TEST_CASE("rows the ordered path leaves to the full sort give what the full sort gives") {
  sampler s;
  sampler_settings p;
  p.top_p = 0.9f;
  std::vector<float> with_nan{1.0f, std::nanf(""), 3.0f, 2.0f, 3.0f};
  std::vector<float> with_inf{1.0f, std::numeric_limits<float>::infinity(), 3.0f, 2.0f};
  std::vector<float> all_masked(6, -std::numeric_limits<float>::infinity());
  for (const auto& row : {with_nan, with_inf, all_masked}) {
    auto work = row;
    const auto got = s.candidates(work, p, {}, {});
    const auto want = reference_candidates(row, p);
    REQUIRE(got.ids.size() == want.ids.size());
    for (std::size_t i = 0; i < want.ids.size(); ++i) {
      CHECK(got.ids[i] == want.ids[i]);
      CHECK(same_bits(got.weights[i], want.weights[i]));
    }
    CHECK(same_bits(static_cast<float>(got.total), static_cast<float>(want.total)));
  }
  // A temperature so low that 1 / T overflows the ordered path's float arithmetic.
  p.temperature = 1e-35f;
  std::mt19937 rng(3);
  const auto row = random_row(rng, 1000, 0);
  check_against_full_sort(s, row, p, 10);
}

TEST_CASE("penalties, then the cuts: candidates are the full sort's of the penalised row") {
  std::mt19937 rng(11);
  sampler s;
  const auto row = random_row(rng, 1000, 2);
  std::vector<token_id> context{3, 3, 17, 500, 999, 0};
  std::vector<token_id> output{17, 500, 500};
  sampler_settings p;
  p.top_p = 0.9f;
  p.min_p = 0.01f;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.4f;
  p.presence_penalty = 0.2f;
  auto work = row;
  const auto got = s.candidates(work, p, context, output);
  const auto want = reference_candidates(work, p); // work now holds the penalised logits
  REQUIRE(got.ids.size() == want.ids.size());
  for (std::size_t i = 0; i < want.ids.size(); ++i)
    CHECK(got.ids[i] == want.ids[i]);
}

TEST_CASE("probabilities() is the candidates' weights over their total, zero elsewhere") {
  std::mt19937 rng(5);
  sampler s;
  for (int shape : {0, 2, 3}) {
    const auto row = random_row(rng, 1000, shape);
    for (const auto& p : settings_for(1000)) {
      auto work = row;
      std::vector<float> probs(row.size(), -1.0f);
      s.probabilities(work, p, {}, {}, probs);
      const auto want = reference_candidates(row, p);
      std::vector<float> expected(row.size(), 0.0f);
      for (std::size_t i = 0; i < want.ids.size(); ++i)
        expected[want.ids[i]] = static_cast<float>(want.weights[i] * (1.0 / want.total));
      if (p.top_p < 1.0f) { // the total may differ in its last bit: so may a probability, by a float ulp
        for (std::size_t i = 0; i < row.size(); ++i)
          CHECK(probs[i] == doctest::Approx(expected[i]).epsilon(1e-6));
      } else {
        CHECK(std::equal(probs.begin(), probs.end(), expected.begin(), same_bits));
      }
    }
  }
}

TEST_CASE("candidates and draws match the full sort at extreme temperatures") {
  std::mt19937 rng(13);
  sampler s;
  for (float t : {1e-6f, 1e-3f, 50.0f, 1e6f}) {
    for (int shape : {0, 2, 3}) {
      const auto row = random_row(rng, 1000, shape);
      for (auto p : settings_for(1000)) {
        p.temperature = t;
        CAPTURE(t);
        CAPTURE(shape);
        check_against_full_sort(s, row, p, 10);
      }
    }
  }
}
