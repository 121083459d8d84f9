// The speculative verifier: greedy speculation gives exactly the greedy tokens, and sampled speculation emits tokens
// that follow the target's transformed distribution (chi-square over fixed seeds, so every run sees the same numbers).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "runtime/sampler.hpp"
#include "runtime/spec_verifier.hpp"
#include "tests/support/chi_square.hpp"

using namespace troupe::runtime;
using namespace troupe::testing;

namespace {

constexpr int vocab = 8;

// --- distributions ---------------------------------------------------------------------------------------------

std::vector<double> normalised(std::vector<double> w) {
  double total = 0;
  for (double x : w)
    total += x;
  for (double& x : w)
    x /= total;
  return w;
}

std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs)
    l.push_back(static_cast<float>(std::log(p)));
  return l;
}

// Inverse CDF, the way a draft model's sampler would draw.
token_id draw(const std::vector<double>& probs, double u) {
  double cum = 0;
  for (std::size_t i = 0; i < probs.size(); ++i) {
    cum += probs[i];
    if (u < cum && probs[i] > 0)
      return static_cast<token_id>(i);
  }
  for (std::size_t i = probs.size(); i-- > 0;)
    if (probs[i] > 0)
      return static_cast<token_id>(i);
  return 0;
}

// softmax(log p / T) restricted to the top k, then to the smallest prefix whose mass reaches top_p, renormalised:
// the target distribution as the sampler's transforms define it, computed here independently of the sampler.
std::vector<double> transformed(const std::vector<double>& p, double temperature, int top_k, double top_p) {
  std::vector<int> order(p.size());
  for (std::size_t i = 0; i < p.size(); ++i)
    order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  std::vector<double> w(p.size(), 0.0);
  for (int i = 0; i < top_k; ++i)
    w[order[i]] = std::pow(p[order[i]], 1.0 / temperature);
  w = normalised(w);
  double cum = 0;
  std::vector<double> out(p.size(), 0.0);
  for (int i = 0; i < top_k; ++i) {
    out[order[i]] = w[order[i]];
    cum += w[order[i]];
    if (cum >= top_p)
      break;
  }
  return normalised(out);
}

// The first emitted token over many seeded trials, for a position-independent target p and draft q (empty q: a
// deterministic draft of `fixed` tokens). Draft tokens are drawn on the plain sampler's counters (seed, step + i),
// as a draft model running runtime::sampler would, so the test also shows the verifier's streams are independent.
struct first_token_run {
  std::vector<long> emitted = std::vector<long>(vocab, 0);
  std::vector<long> drafted = std::vector<long>(vocab, 0);
  long accepted_tokens = 0;
};

first_token_run run_first_token(const std::vector<float>& target_row, const std::vector<double>& q, token_id fixed,
                                int k, const sampler_settings& params, int trials, std::uint64_t seed_base) {
  spec_verifier verifier;
  first_token_run run;
  const std::vector<token_id> history{3, 1, 4};
  std::vector<float> logits(static_cast<std::size_t>((k + 1) * vocab));
  std::vector<float> q_rows;
  if (!q.empty())
    for (int i = 0; i < k; ++i)
      q_rows.insert(q_rows.end(), q.begin(), q.end());
  std::vector<token_id> draft(k), out(k + 1);
  for (int t = 0; t < trials; ++t) {
    const std::uint64_t seed = seed_base + t, step = 5 + t % 7;
    for (int i = 0; i < k; ++i)
      draft[i] = q.empty() ? fixed : draw(q, counter_uniform(seed, step + i));
    for (int i = 0; i <= k; ++i)
      std::copy(target_row.begin(), target_row.end(), logits.begin() + i * vocab);
    spec_input in{&params, seed, step, history, 1, draft, q_rows, logits, vocab};
    auto r = verifier.verify(in, out);
    REQUIRE(r.emitted == r.accepted + 1);
    ++run.emitted[out[0]];
    if (draft[0] >= 0 && draft[0] < vocab)
      ++run.drafted[draft[0]];
    run.accepted_tokens += r.accepted;
  }
  return run;
}

const std::vector<double> target_p = normalised({0.22, 0.18, 0.15, 0.12, 0.11, 0.09, 0.08, 0.05});

} // namespace

TEST_CASE("the chi-square tail used by these tests matches tabulated quantiles") {
  CHECK(chi_square_tail(3.841459, 1) == doctest::Approx(0.05).epsilon(1e-4));
  CHECK(chi_square_tail(14.06714, 7) == doctest::Approx(0.05).epsilon(1e-4));
  CHECK(chi_square_tail(29.87750, 7) == doctest::Approx(1e-4).epsilon(1e-3));
  CHECK(chi_square_tail(2.732637, 8) == doctest::Approx(0.95).epsilon(1e-4));
  CHECK(chi_square_tail(82.52873, 63) == doctest::Approx(0.05).epsilon(1e-4));
}

// --- greedy ----------------------------------------------------------------------------------------------------

TEST_CASE("greedy keeps a draft that matches every argmax and adds the argmax of the last row as a bonus") {
  sampler_settings p;
  p.temperature = 0.0f;
  // Row i's argmax is token i + 2.
  std::vector<float> logits(4 * vocab, 0.0f);
  for (int i = 0; i < 4; ++i)
    logits[i * vocab + i + 2] = 5.0f;
  std::vector<token_id> history{0}, draft{2, 3, 4}, out(4);
  spec_verifier v;
  auto r = v.verify({&p, 1, 0, history, 1, draft, {}, logits, vocab}, out);
  CHECK(r.accepted == 3);
  CHECK(r.emitted == 4);
  CHECK(out == std::vector<token_id>{2, 3, 4, 5});
}

TEST_CASE("verification applies the request's logit rules row by row: bias always, the stop ids until min_tokens") {
  sampler_settings p;
  p.temperature = 0.0f;
  // Row i's argmax is token i + 2; token 6 is a stop id, masked while the output index is below 2.
  std::vector<float> base(4 * vocab, 0.0f);
  for (int i = 0; i < 4; ++i)
    base[i * vocab + i + 2] = 5.0f;
  sampling_params request;
  request.min_tokens = 2;
  request.logit_bias = {{6, 10.0f}}; // 6 beats every row's argmax wherever it is not masked
  const std::vector<token_id> stops{6};
  const auto rules = logit_rules_for(request, stops);
  std::vector<token_id> history{0}, out(4, -1);
  // Output indices 0..3: rows 0 and 1 masked (argmax 2, 3 stand), rows 2 and 3 pick 6.
  std::vector<token_id> draft{2, 3, 6};
  auto logits = base;
  spec_verifier v;
  spec_input in{&p, 1, 0, history, 1, draft, {}, logits, vocab};
  in.rules = &rules;
  auto r = v.verify(in, out);
  CHECK(r.accepted == 3);
  CHECK(out == std::vector<token_id>{2, 3, 6, 6});
  // The same draft from output index 1: row 1 (index 2) is no longer masked, 3 is rejected for 6.
  logits = base;
  in.step = 1;
  in.target_logits = logits;
  out.assign(4, -1);
  r = v.verify(in, out);
  CHECK(r.accepted == 1);
  CHECK(out[0] == 2);
  CHECK(out[1] == 6);
}

TEST_CASE("accept_target_draws gives verify()'s tokens from the rows' plain draws, with penalties and seeds") {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> noise(-2.0f, 2.0f);
  std::uniform_int_distribution<int> any(0, vocab - 1);
  int accepted_total = 0;
  for (int trial = 0; trial < 400; ++trial) {
    sampler_settings p;
    p.temperature = trial % 3 == 0 ? 0.0f : 0.9f;
    p.top_p = trial % 2 ? 0.9f : 1.0f;
    p.repetition_penalty = trial % 4 == 1 ? 1.3f : 1.0f;
    p.frequency_penalty = trial % 5 == 2 ? 0.5f : 0.0f;
    const std::size_t k = 1 + static_cast<std::size_t>(trial % 4);
    std::vector<float> logits((k + 1) * vocab);
    for (auto& x : logits)
      x = noise(rng);
    const std::vector<token_id> history{1, 2, 2};
    const std::uint64_t seed = 100 + static_cast<std::uint64_t>(trial), step = 2;
    // The plain draws of each row: row i sees history + x_1..x_i-1, output index step + i.
    std::vector<token_id> draft(k);
    std::vector<token_id> draws(k + 1);
    sampler s;
    for (std::size_t i = 0; i <= k; ++i) {
      std::vector<token_id> ctx = history;
      ctx.insert(ctx.end(), draft.begin(), draft.begin() + static_cast<std::ptrdiff_t>(i));
      std::vector<float> row(logits.begin() + static_cast<std::ptrdiff_t>(i * vocab),
                             logits.begin() + static_cast<std::ptrdiff_t>((i + 1) * vocab));
      draws[i] = s.sample(row, p, ctx, std::span<const token_id>(ctx).subspan(1), seed, step + i);
      // The draft agrees with the draws up to a random point (a draft token depends only on those before it).
      if (i < k)
        draft[i] = any(rng) < vocab / 2 ? draws[i] : static_cast<token_id>(any(rng));
    }
    std::vector<token_id> expected(k + 1, -1), got(k + 1, -1);
    auto copy = logits;
    spec_verifier v;
    const auto r = v.verify({&p, seed, step, history, 1, draft, {}, copy, vocab}, expected);
    const auto a = accept_target_draws(draft, draws, got);
    CHECK(a.accepted == r.accepted);
    CHECK(a.emitted == r.emitted);
    CHECK(got == expected);
    accepted_total += a.accepted;
  }
  CHECK(accepted_total > 100); // the trials met acceptance as well as rejection
  std::vector<token_id> out(2);
  CHECK_THROWS_AS(accept_target_draws(std::vector<token_id>{1}, std::vector<token_id>{1}, out), std::logic_error);
}

TEST_CASE("greedy stops at the first mismatch and emits the target argmax there") {
  sampler_settings p;
  p.temperature = 0.0f;
  std::vector<float> base(4 * vocab, 0.0f);
  for (int i = 0; i < 4; ++i)
    base[i * vocab + i + 2] = 5.0f;
  for (int miss = 0; miss < 3; ++miss) {
    std::vector<token_id> draft{2, 3, 4}, out(4, -1);
    draft[miss] = 7;
    auto logits = base;
    // A draft distribution that favours the draft token is irrelevant at temperature 0.
    std::vector<float> q(3 * vocab, 0.0f);
    for (int i = 0; i < 3; ++i)
      q[i * vocab + draft[i]] = 1.0f;
    std::vector<token_id> history{0};
    spec_verifier v;
    auto r = v.verify({&p, 1, 0, history, 1, draft, q, logits, vocab}, out);
    CHECK(r.accepted == miss);
    CHECK(r.emitted == miss + 1);
    for (int i = 0; i <= miss; ++i)
      CHECK(out[i] == i + 2);
  }
}

TEST_CASE("greedy speculation with penalties over the draft gives exactly the tokens of plain greedy decoding") {
  // A toy model: logits depend on the last token. Penalties make the argmax depend on the whole history, so the
  // verifier must count accepted draft tokens in it. The draft is a different (sometimes wrong) greedy model.
  constexpr int v = 16;
  auto model = [](token_id last, std::vector<float>& row) {
    for (int t = 0; t < v; ++t)
      row[t] = static_cast<float>(std::sin(0.7 * last + 1.3 * t) * 3.0 + 0.1 * t);
  };
  auto draft_model = [](token_id last, std::vector<float>& row) {
    for (int t = 0; t < v; ++t)
      row[t] = static_cast<float>(std::sin(0.7 * last + 1.3 * t) * 3.0 + 0.1 * ((t * 7) % v));
  };
  sampler_settings p;
  p.temperature = 0.0f;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.4f;
  p.presence_penalty = 0.2f;
  const std::vector<token_id> prompt{5, 9, 5};
  constexpr int n = 80;

  std::vector<token_id> plain = prompt;
  sampler s;
  std::vector<float> row(v);
  while (static_cast<int>(plain.size()) < static_cast<int>(prompt.size()) + n) {
    model(plain.back(), row);
    std::span<const token_id> ctx(plain);
    plain.push_back(s.sample(row, p, ctx, ctx.subspan(prompt.size()), 0, 0));
  }

  for (int k : {1, 3, 6}) {
    std::vector<token_id> spec = prompt;
    spec_verifier verifier;
    sampler draft_sampler;
    long accepted = 0, rounds = 0;
    while (static_cast<int>(spec.size()) < static_cast<int>(prompt.size()) + n) {
      // The draft decodes greedily with the same penalties over history + its own tokens.
      std::vector<token_id> draft, extended = spec;
      for (int i = 0; i < k; ++i) {
        draft_model(extended.back(), row);
        std::span<const token_id> ctx(extended);
        extended.push_back(draft_sampler.sample(row, p, ctx, ctx.subspan(prompt.size()), 0, 0));
        draft.push_back(extended.back());
      }
      std::vector<float> logits((k + 1) * v);
      for (int i = 0; i <= k; ++i) {
        model(extended[spec.size() - 1 + i], row);
        std::copy(row.begin(), row.end(), logits.begin() + i * v);
      }
      std::vector<token_id> out(k + 1);
      auto r = verifier.verify({&p, 0, 0, spec, prompt.size(), draft, {}, logits, v}, out);
      spec.insert(spec.end(), out.begin(), out.begin() + r.emitted);
      accepted += r.accepted;
      ++rounds;
    }
    spec.resize(plain.size());
    INFO("k = " << k << ", accepted " << accepted << " draft tokens in " << rounds << " rounds");
    CHECK(spec == plain);
    CHECK(accepted > 0);          // the draft was right sometimes...
    CHECK(accepted < rounds * k); // ...and wrong sometimes, so both paths ran
  }
}

TEST_CASE("seeded speculation with a deterministic draft gives exactly the tokens of plain seeded decoding") {
  // As above, sampled: temperature, top-k, top-p and penalties, one seed. Where the draft is checked, and how
  // far (the scheduler's k and its preemptions decide that), must not change a single token: a seeded request
  // is reproducible whatever its batch did. Each round drafts a different number of tokens (0 = a plain step).
  constexpr int v = 16;
  auto model = [](token_id last, std::vector<float>& row) {
    for (int t = 0; t < v; ++t)
      row[t] = static_cast<float>(std::sin(0.7 * last + 1.3 * t) * 1.5 + 0.1 * t);
  };
  sampler_settings p;
  p.temperature = 0.9f;
  p.top_k = 10;
  p.top_p = 0.95f;
  p.repetition_penalty = 1.2f;
  p.presence_penalty = 0.3f;
  const std::vector<token_id> prompt{5, 9, 5};
  constexpr int n = 120;
  constexpr std::uint64_t seed = 424242;

  std::vector<token_id> plain = prompt;
  sampler s;
  std::vector<float> row(v);
  for (std::uint64_t step = 0; static_cast<int>(plain.size()) < static_cast<int>(prompt.size()) + n; ++step) {
    model(plain.back(), row);
    std::span<const token_id> ctx(plain);
    plain.push_back(s.sample(row, p, ctx, ctx.subspan(prompt.size()), seed, step));
  }

  for (unsigned pattern : {1u, 7u, 12345u}) {
    std::vector<token_id> spec = prompt;
    spec_verifier verifier;
    long accepted = 0, drafted = 0;
    unsigned state = pattern;
    while (static_cast<int>(spec.size()) < static_cast<int>(prompt.size()) + n) {
      state = state * 1103515245u + 12345u;
      const int k = static_cast<int>((state >> 16) % 5); // 0..4
      // An n-gram-like draft: the plain tokens ahead when the state's bit says so, else a wrong guess.
      std::vector<token_id> draft;
      for (int i = 0; i < k; ++i) {
        const std::size_t at = spec.size() + static_cast<std::size_t>(i);
        const bool right = ((state >> (i + 3)) & 3u) != 0 && at < plain.size();
        draft.push_back(right ? plain[at] : static_cast<token_id>((i * 5 + 3) % v));
      }
      std::vector<token_id> extended = spec;
      extended.insert(extended.end(), draft.begin(), draft.end());
      std::vector<float> logits(static_cast<std::size_t>((k + 1) * v));
      for (int i = 0; i <= k; ++i) {
        model(extended[spec.size() - 1 + static_cast<std::size_t>(i)], row);
        std::copy(row.begin(), row.end(), logits.begin() + i * v);
      }
      std::vector<token_id> out(static_cast<std::size_t>(k + 1));
      const auto step = static_cast<std::uint64_t>(spec.size() - prompt.size());
      auto r = verifier.verify({&p, seed, step, spec, prompt.size(), draft, {}, logits, v}, out);
      spec.insert(spec.end(), out.begin(), out.begin() + r.emitted);
      accepted += r.accepted;
      drafted += k;
    }
    spec.resize(plain.size());
    INFO("pattern " << pattern << ": accepted " << accepted << " of " << drafted << " draft tokens");
    CHECK(spec == plain);
    CHECK(accepted > 0);
    CHECK(accepted < drafted);
  }
}

// --- sampled: the target distribution is preserved --------------------------------------------------------------

TEST_CASE("a draft equal to the target is always accepted") {
  sampler_settings p;
  auto run = run_first_token(logits_of(target_p), target_p, 0, 3, p, 5000, 11);
  CHECK(run.accepted_tokens == 3 * 5000);
}

TEST_CASE("the first emitted token follows the target distribution for several draft distributions") {
  const int trials = 200000;
  sampler_settings p; // temperature 1, no cuts: p is softmax(logits) = target_p
  const auto target_row = logits_of(target_p);

  SUBCASE("q equal to p") {
    auto run = run_first_token(target_row, target_p, 0, 2, p, trials, 1000);
    CHECK_FITS(run.emitted, target_p);
  }
  SUBCASE("q with zeros where p is not zero") {
    const auto q = normalised({0.0, 0.5, 0.0, 0.3, 0.0, 0.0, 0.2, 0.0});
    auto run = run_first_token(target_row, q, 0, 2, p, trials, 2000);
    CHECK_FITS(run.emitted, target_p);
  }
  SUBCASE("q far from p, and the test notices when the draft is emitted unchecked") {
    const auto q = normalised({0.02, 0.03, 0.05, 0.08, 0.1, 0.14, 0.18, 0.4});
    auto run = run_first_token(target_row, q, 0, 3, p, trials, 3000);
    CHECK_FITS(run.emitted, target_p);
    // The draft's own tokens are far from p: a verifier that accepted everything would fail the same check.
    CHECK(goodness_of_fit(run.drafted, target_p).p_value < 1e-12);
  }
  SUBCASE("q one-hot given as a full row") {
    std::vector<double> q(vocab, 0.0);
    q[2] = 1.0;
    auto run = run_first_token(target_row, q, 0, 2, p, trials, 4000);
    CHECK_FITS(run.emitted, target_p);
  }
  SUBCASE("a deterministic draft without rows") {
    auto run = run_first_token(target_row, {}, 6, 3, p, trials, 5000);
    CHECK_FITS(run.emitted, target_p);
    // Accepted with probability p(6): the first token is the draft about 8 percent of the time.
    CHECK(run.accepted_tokens > 0);
  }
  SUBCASE("a deterministic draft of a token outside the vocabulary is never accepted") {
    auto run = run_first_token(target_row, {}, vocab + 3, 2, p, 20000, 6000);
    CHECK(run.accepted_tokens == 0);
    CHECK_FITS(run.emitted, target_p);
  }
}

TEST_CASE("top-k, top-p and temperature shape the emitted distribution exactly as they shape plain sampling") {
  const int trials = 200000;
  sampler_settings p;
  p.temperature = 0.8f;
  p.top_k = 5;
  p.top_p = 0.8f;
  // p at T = 0.8 over the top 5 has cumulative mass 0.30, 0.54, 0.73, 0.87, 1: top_p keeps four tokens.
  const auto expected = transformed(target_p, 0.8, 5, 0.8);
  REQUIRE(std::count_if(expected.begin(), expected.end(), [](double x) { return x > 0; }) == 4);
  const auto target_row = logits_of(target_p);

  SUBCASE("a draft that ignores the cuts and proposes tokens the target has cut") {
    const auto q = normalised({0.05, 0.05, 0.1, 0.1, 0.1, 0.2, 0.2, 0.2});
    auto run = run_first_token(target_row, q, 0, 2, p, trials, 7000);
    CHECK_FITS(run.emitted, expected);
  }
  SUBCASE("a draft whose q went through the same transforms on its own logits") {
    // The draft model ranks tokens differently; its q is its logits through the same pipeline.
    const auto draft_raw = normalised({0.1, 0.25, 0.2, 0.05, 0.15, 0.1, 0.1, 0.05});
    sampler s;
    auto draft_logits = logits_of(draft_raw);
    std::vector<float> q_row(vocab);
    s.probabilities(draft_logits, p, {}, {}, q_row);
    std::vector<double> q(q_row.begin(), q_row.end());
    CHECK(std::count_if(q.begin(), q.end(), [](double x) { return x == 0; }) >= 3);
    auto run = run_first_token(target_row, q, 0, 3, p, trials, 8000);
    CHECK_FITS(run.emitted, expected);
  }
  SUBCASE("the probability row equals the sampler's own draws") {
    // sampler::probabilities is what sample() draws from: the same cut, the same weights.
    sampler s;
    auto row = target_row;
    std::vector<float> probs(vocab);
    s.probabilities(row, p, {}, {}, probs);
    for (int i = 0; i < vocab; ++i)
      CHECK(probs[i] == doctest::Approx(expected[i]).epsilon(1e-5));
    std::vector<long> counts(vocab, 0);
    for (int t = 0; t < trials; ++t) {
      auto r = target_row;
      ++counts[s.sample(r, p, {}, {}, 9000, t)];
    }
    CHECK_FITS(counts, expected);
  }
}

TEST_CASE("the first two emitted tokens of k = 2 speculation follow the target's joint distribution with penalties") {
  // A toy target and draft whose next-token distributions depend on the previous token; the target's penalties
  // make position 2 depend on the emitted (or drafted) first token too. The decode loop keeps going until two
  // tokens are out, as a real one would when the first round emits only the corrected token.
  auto target_logit = [](int prev, int t) { return static_cast<float>(0.9 * std::cos(1.1 * prev + 0.8 * t)); };
  auto draft_prob = [](int prev, int t) {
    if ((t + prev) % 4 == 1)
      return 0.0; // zeros where the target is not zero
    return 0.5 + std::sin(0.5 * prev + 1.7 * t) * 0.45;
  };
  sampler_settings p;
  p.temperature = 1.0f;
  p.repetition_penalty = 1.25f;
  p.frequency_penalty = 0.3f;
  p.presence_penalty = 0.5f;
  const std::vector<token_id> prompt{0, 5};

  // Expected joint, by hand: repetition over prompt + emitted, frequency/presence over emitted.
  auto penalised_softmax = [&](int prev, const std::vector<token_id>& context, const std::vector<token_id>& output) {
    std::vector<double> w(vocab);
    for (int t = 0; t < vocab; ++t) {
      double l = target_logit(prev, t);
      if (std::find(context.begin(), context.end(), t) != context.end())
        l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
      long count = std::count(output.begin(), output.end(), t);
      if (count > 0)
        l -= p.frequency_penalty * count + p.presence_penalty;
      w[t] = std::exp(l);
    }
    return normalised(w);
  };
  std::vector<double> joint(vocab * vocab);
  const auto first = penalised_softmax(prompt.back(), prompt, {});
  for (int a = 0; a < vocab; ++a) {
    auto context = prompt;
    context.push_back(a);
    const auto second = penalised_softmax(a, context, {a});
    for (int b = 0; b < vocab; ++b)
      joint[a * vocab + b] = first[a] * second[b];
  }

  std::vector<std::vector<double>> q_table(vocab);
  for (int prev = 0; prev < vocab; ++prev) {
    std::vector<double> w(vocab);
    for (int t = 0; t < vocab; ++t)
      w[t] = draft_prob(prev, t);
    q_table[prev] = normalised(w);
  }

  const int trials = 200000, k = 2;
  spec_verifier verifier;
  std::vector<long> counts(vocab * vocab, 0);
  long single_token_rounds = 0;
  std::vector<float> logits((k + 1) * vocab), q_rows(k * vocab);
  std::vector<token_id> draft(k), out(k + 1);
  for (int trial = 0; trial < trials; ++trial) {
    const std::uint64_t seed = 77000 + trial;
    std::vector<token_id> seq = prompt;
    while (seq.size() < prompt.size() + 2) {
      const std::uint64_t step = seq.size() - prompt.size();
      token_id prev = seq.back();
      for (int i = 0; i < k; ++i) {
        std::copy(q_table[prev].begin(), q_table[prev].end(), q_rows.begin() + i * vocab);
        draft[i] = draw(q_table[prev], counter_uniform(seed, step + i));
        prev = draft[i];
      }
      for (int i = 0; i <= k; ++i) {
        const token_id last = i == 0 ? seq.back() : draft[i - 1];
        for (int t = 0; t < vocab; ++t)
          logits[i * vocab + t] = target_logit(last, t);
      }
      auto r = verifier.verify({&p, seed, step, seq, prompt.size(), draft, q_rows, logits, vocab}, out);
      single_token_rounds += r.emitted == 1;
      seq.insert(seq.end(), out.begin(), out.begin() + r.emitted);
    }
    ++counts[seq[prompt.size()] * vocab + seq[prompt.size() + 1]];
  }
  CHECK(single_token_rounds > trials / 10); // the continue-after-rejection path ran often
  CHECK_FITS(counts, joint);
}

TEST_CASE("seeded speculation is reproducible and independent of what else the verifier checks") {
  sampler_settings p;
  p.top_k = 6;
  const auto q = normalised({0.3, 0.05, 0.05, 0.2, 0.1, 0.1, 0.1, 0.1});
  std::vector<float> q_rows;
  for (int i = 0; i < 3; ++i)
    q_rows.insert(q_rows.end(), q.begin(), q.end());
  const auto target_row = logits_of(target_p);
  auto verify_one = [&](spec_verifier& v, std::uint64_t seed, std::uint64_t step) {
    std::vector<token_id> history{1, 2}, draft(3), out(4);
    for (int i = 0; i < 3; ++i)
      draft[i] = draw(q, counter_uniform(seed, step + i));
    std::vector<float> logits;
    for (int i = 0; i < 4; ++i)
      logits.insert(logits.end(), target_row.begin(), target_row.end());
    auto r = v.verify({&p, seed, step, history, 2, draft, q_rows, logits, vocab}, out);
    out.resize(r.emitted);
    return out;
  };
  spec_verifier alone, busy;
  for (std::uint64_t step = 0; step < 200; ++step) {
    auto a = verify_one(alone, 42, step);
    verify_one(busy, 1000 + step, 3 * step); // another sequence shares the verifier
    CHECK(verify_one(busy, 42, step) == a);
  }
}

TEST_CASE("spans of the wrong size are refused") {
  sampler_settings p;
  std::vector<token_id> history{1}, draft{1, 2}, out(3), short_out(2);
  std::vector<float> logits(3 * vocab), few_logits(2 * vocab), q(2 * vocab - 1);
  spec_verifier v;
  CHECK_THROWS_AS(v.verify({&p, 0, 0, history, 1, draft, {}, few_logits, vocab}, out), std::logic_error);
  CHECK_THROWS_AS(v.verify({&p, 0, 0, history, 1, draft, q, logits, vocab}, out), std::logic_error);
  CHECK_THROWS_AS(v.verify({&p, 0, 0, history, 1, draft, {}, logits, vocab}, short_out), std::logic_error);
  CHECK_NOTHROW(v.verify({&p, 0, 0, history, 1, draft, {}, logits, vocab}, out));
}
