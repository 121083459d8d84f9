// GPU sampling against its CPU reference, runtime::sampler: greedy picks the same id
// (ties to the lowest); temperature, top-k, top-p and min-p draw the host's token for the
// same (seed, step), except where u sits within 1e-6 of the boundary between two
// candidates (host_would_draw: the two sum their weights differently); and the draws follow the host's
// probabilities. Token buffers are poisoned (-1) before each run.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/sampling.hpp"
#include "runtime/sampler.hpp"
#include "tests/gpu/gpu_test_support.hpp"
#include "tests/gpu/host_draw_check.hpp"
#include "tests/support/chi_square.hpp"

using namespace troupe::testing::gpu;
namespace kcu = troupe::kernels::cuda;
using troupe::runtime::sampler;
using troupe::runtime::sampling_params;
using troupe::runtime::token_id;

namespace {

sampling_params params_of(float temperature, int top_k = 0, float top_p = 1.0f, float min_p = 0.0f) {
  sampling_params p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

kcu::sample_row_params row_params(const sampling_params& p, int row, std::uint64_t seed, std::uint64_t step) {
  return {row,     p.temperature, p.top_k,
          p.top_p, p.min_p,       p.greedy() ? 0.0 : troupe::runtime::counter_uniform(seed, step)};
}

std::vector<token_id> sample_on_gpu(const std::vector<float>& logits, int vocab,
                                    const std::vector<kcu::sample_row_params>& rows) {
  device_buffer<float> d_logits(logits.size());
  d_logits.upload(logits);
  auto d_params = to_device_raw(rows);
  device_buffer<std::int32_t> d_tokens(rows.size());
  d_tokens.fill_bytes(0xff); // -1: a row the kernel never wrote
  REQUIRE(kcu::sample_rows(d_logits.data(), vocab, d_params.data(), static_cast<int>(rows.size()), d_tokens.data(),
                           nullptr) == cudaSuccess);
  sync_or_fail();
  std::vector<std::int32_t> tokens(rows.size());
  d_tokens.download(tokens);
  return tokens;
}

struct agreement {
  int rows = 0, same = 0;
};

// Every row of `logits` sampled with `p` on both sides; returns how often they agreed.
agreement compare_with_host(const std::vector<float>& logits, int vocab, const sampling_params& p,
                            std::uint64_t seed_base) {
  const int rows = static_cast<int>(logits.size() / vocab);
  std::vector<kcu::sample_row_params> params;
  for (int r = 0; r < rows; ++r)
    params.push_back(row_params(p, r, seed_base + r, 3 * r + 1));
  const auto gpu = sample_on_gpu(logits, vocab, params);
  agreement a;
  for (int r = 0; r < rows; ++r) {
    CAPTURE(r);
    REQUIRE(gpu[r] >= 0);
    REQUIRE(gpu[r] < vocab);
    ++a.rows;
    a.same +=
        host_would_draw(std::span(logits).subspan(static_cast<std::size_t>(r) * vocab, vocab), p, params[r].u, gpu[r]);
  }
  return a;
}

std::vector<float> random_logits(int rows, int vocab, std::mt19937& rng, float spread) {
  auto logits = random_values(static_cast<std::size_t>(rows) * vocab, rng, spread);
  if (vocab >= 4) {
    // Row 0: the top logit twice (ties go to the lower id), and masked tokens.
    float top = logits[0];
    for (int i = 0; i < vocab; ++i)
      top = std::max(top, logits[i]);
    logits[vocab / 2] = top + 1.0f;
    logits[vocab / 3] = top + 1.0f;
    logits[1] = -std::numeric_limits<float>::infinity();
  }
  return logits;
}

} // namespace

TEST_CASE("cuda sampling: greedy picks the host's argmax, ties to the lowest id") {
  std::mt19937 rng(7);
  for (int vocab : {1, 7, 512, 32000, 128256}) {
    CAPTURE(vocab);
    auto logits = random_logits(24, vocab, rng, 2.0f);
    const auto a = compare_with_host(logits, vocab, params_of(0.0f), 100);
    CHECK(a.same == a.rows);
  }
  // Every logit equal: id 0.
  std::vector<float> flat(1000, 0.25f);
  CHECK(sample_on_gpu(flat, 1000, {row_params(params_of(0.0f), 0, 0, 0)}) == std::vector<token_id>{0});
}

TEST_CASE("cuda sampling: temperature, top-k, top-p and min-p draw the host's tokens for the same seeds") {
  struct named {
    const char* what;
    sampling_params p;
  };
  const std::vector<named> cases = {
      {"temperature 1", params_of(1.0f)},
      {"temperature 0.7, top-k 50", params_of(0.7f, 50)},
      {"top-k 1", params_of(1.0f, 1)},
      {"top-k = vocab - 1", params_of(1.0f, -1)}, // set per vocab below
      {"top-p 0.9", params_of(1.0f, 0, 0.9f)},
      {"temperature 1.3, top-p 0.5", params_of(1.3f, 0, 0.5f)},
      {"min-p 0.05", params_of(1.0f, 0, 1.0f, 0.05f)},
      {"temperature 0.8, top-k 40, top-p 0.8, min-p 0.02", params_of(0.8f, 40, 0.8f, 0.02f)},
      {"temperature 2, top-p 0.99", params_of(2.0f, 0, 0.99f)},
  };
  std::mt19937 rng(11);
  int rows = 0, same = 0;
  for (int vocab : {7, 512, 32000, 128256}) {
    for (const auto& c : cases) {
      auto p = c.p;
      if (p.top_k == -1)
        p.top_k = vocab - 1;
      CAPTURE(vocab);
      CAPTURE(std::string(c.what));
      // Spreads from peaked to flat: the cuts then keep from a handful to most of the vocabulary.
      for (float spread : {0.5f, 3.0f}) {
        auto logits = random_logits(vocab >= 32000 ? 16 : 64, vocab, rng, spread);
        const auto a = compare_with_host(logits, vocab, p, 1000 * vocab + static_cast<int>(spread * 10));
        rows += a.rows;
        same += a.same;
      }
    }
  }
  INFO(same << " of " << rows << " rows drew the host's token");
  CHECK(same >= rows * 99 / 100);
}

TEST_CASE("cuda sampling: 40,000 draws from one row follow the host's probabilities (chi-square)") {
  const int vocab = 48, draws = 40000;
  std::mt19937 rng(5);
  auto row = random_values(vocab, rng, 1.5f);
  const auto p = params_of(0.9f, 30, 0.95f, 0.01f);
  std::vector<kcu::sample_row_params> params;
  for (int d = 0; d < draws; ++d)
    params.push_back(row_params(p, 0, 77, d));
  const auto tokens = sample_on_gpu(row, vocab, params);
  std::vector<double> counts(vocab, 0.0);
  for (auto t : tokens) {
    REQUIRE(t >= 0);
    REQUIRE(t < vocab);
    counts[t] += 1;
  }
  sampler host;
  std::vector<float> probs(vocab), copy = row;
  host.probabilities(copy, p, {}, {}, probs);
  double chi = 0;
  int df = -1;
  for (int i = 0; i < vocab; ++i) {
    const double expected = probs[i] * draws;
    if (expected == 0) {
      CHECK(counts[i] == 0); // cut away: never drawn
      continue;
    }
    chi += (counts[i] - expected) * (counts[i] - expected) / expected;
    ++df;
  }
  const double tail = troupe::testing::chi_square_tail(chi, df);
  INFO("chi-square " << chi << " with " << df << " degrees of freedom, p = " << tail);
  CHECK(tail > 1e-4);
}

TEST_CASE("cuda sampling: NaN logits are never drawn, and a row of +inf still gives a valid token") {
  const int vocab = 300;
  std::mt19937 rng(3);
  auto logits = random_values(2 * vocab, rng, 1.0f);
  for (int i = 0; i < vocab; i += 3)
    logits[i] = std::numeric_limits<float>::quiet_NaN();
  for (int i = vocab; i < 2 * vocab; ++i)
    logits[i] = std::numeric_limits<float>::infinity();
  std::vector<kcu::sample_row_params> params;
  for (int d = 0; d < 200; ++d)
    params.push_back(row_params(params_of(1.0f), 0, 9, d));
  params.push_back(row_params(params_of(1.0f), 1, 9, 0));
  params.push_back(row_params(params_of(0.0f), 1, 9, 0));
  const auto tokens = sample_on_gpu(logits, vocab, params);
  for (int d = 0; d < 200; ++d) {
    REQUIRE(tokens[d] >= 0);
    CHECK(tokens[d] % 3 != 0);
  }
  CHECK(tokens[200] >= 0);
  CHECK(tokens[200] < vocab);
  CHECK(tokens[201] == 0);
}
