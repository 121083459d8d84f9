// The speculation-length controller: k falls to 0 when the draft is always rejected, rises to k_max when it is
// always accepted, probes at k = 0 so it recovers, follows the cost model, and stays fixed when switched off.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/adaptive_k.hpp"

using troupe::runtime::adaptive_k;
using troupe::runtime::adaptive_k_config;

namespace {
// One engine step: ask for k, verify (here: accept all or none), report.
int step(adaptive_k& c, bool accept) {
  int k = c.next_k();
  c.observe(k, accept ? k : 0);
  return k;
}
} // namespace

TEST_CASE("the expected tokens per step follow the truncated geometric series") {
  CHECK(adaptive_k::expected_tokens(0.0, 4) == doctest::Approx(1.0));
  CHECK(adaptive_k::expected_tokens(0.5, 2) == doctest::Approx(1.75));
  CHECK(adaptive_k::expected_tokens(1.0, 3) == doctest::Approx(4.0));
  CHECK(adaptive_k::expected_tokens(0.8, 0) == doctest::Approx(1.0));
}

TEST_CASE("k rises to k_max when the draft is always accepted") {
  adaptive_k_config cfg;
  cfg.k_max = 6;
  adaptive_k c(cfg);
  for (int i = 0; i < 30; ++i)
    step(c, true);
  CHECK(c.acceptance() > 0.95);
  CHECK(c.next_k() == 6);
}

TEST_CASE("k backs off to 0 when the draft is never accepted, and failed probes back off too") {
  adaptive_k_config cfg;
  cfg.k_max = 5;
  cfg.probe_interval = 8;
  cfg.probe_k = 2;
  adaptive_k c(cfg);
  int first_zero = -1;
  for (int i = 0; i < 100 && first_zero < 0; ++i)
    if (step(c, false) == 0)
      first_zero = i;
  REQUIRE(first_zero >= 0);
  CHECK(c.acceptance() < cfg.draft_cost);
  // From now on a probe of probe_k tokens comes after probe_interval plain steps; each
  // probe that fails doubles the wait, up to 16 times probe_interval.
  std::vector<int> probes;
  for (int i = 0; i < 800; ++i) {
    int k = step(c, false);
    CHECK((k == 0 || k == 2));
    if (k != 0)
      probes.push_back(i);
  }
  REQUIRE(probes.size() >= 6);
  CHECK(probes[0] < 8);
  const std::vector<int> gaps{16, 32, 64, 128, 128};
  for (std::size_t i = 0; i < gaps.size(); ++i)
    CHECK(probes[i + 1] - probes[i] == gaps[i]);
}

TEST_CASE("a probe that is accepted resets the probe interval") {
  adaptive_k_config cfg;
  cfg.k_max = 3;
  cfg.probe_interval = 4;
  cfg.prior_acceptance = 0.0;
  adaptive_k c(cfg);
  std::vector<int> probes;
  for (int i = 0; i < 200; ++i) {
    int k = c.next_k();
    if (k > 0) {
      probes.push_back(i);
      // The second probe succeeds once, then everything fails again.
      c.observe(k, probes.size() == 3 ? k : 0);
    }
  }
  REQUIRE(probes.size() >= 5);
  CHECK(probes[1] - probes[0] == 8);   // failed: doubled
  CHECK(probes[2] - probes[1] == 16);  // failed: doubled again
  // The third was accepted: acceptance rose, so k may stay > 0 for a while; once it is 0
  // again, the first wait is the configured one.
  bool found_reset = false;
  for (std::size_t i = 3; i + 1 < probes.size(); ++i)
    if (probes[i + 1] - probes[i] == 4 || probes[i + 1] - probes[i] == 1)
      found_reset = true;
  CHECK(found_reset);
}

TEST_CASE("probes let a sequence whose draft starts agreeing again climb back to k_max") {
  adaptive_k_config cfg;
  cfg.k_max = 4;
  cfg.probe_interval = 10;
  adaptive_k c(cfg);
  for (int i = 0; i < 60; ++i)
    step(c, false);
  REQUIRE(c.best_k() == 0);
  int steps = 0;
  while (step(c, true) != 4 && steps < 200)
    ++steps;
  INFO("steps to recover: " << steps);
  CHECK(steps < 100);
}

TEST_CASE("the chosen k maximises expected tokens per unit of cost") {
  adaptive_k_config cfg;
  cfg.k_max = 8;
  cfg.decay = 0.0; // the estimate is the last observation alone
  for (double cost : {0.02, 0.1, 0.3, 1.0}) {
    cfg.draft_cost = cost;
    for (int accepted = 0; accepted <= 8; ++accepted) {
      adaptive_k c(cfg);
      c.observe(8, accepted);
      const double alpha = c.acceptance();
      int best = 0;
      double best_rate = 1.0;
      for (int k = 1; k <= 8; ++k) {
        double rate = adaptive_k::expected_tokens(alpha, k) / (1.0 + cost * k);
        if (rate > best_rate) {
          best = k;
          best_rate = rate;
        }
      }
      CAPTURE(cost);
      CAPTURE(alpha);
      CHECK(c.best_k() == best);
    }
  }
  // Drafting as dear as the target never pays, whatever alpha: (1 - a^(k+1)) / (1 - a) <= k + 1.
  cfg.draft_cost = 1.0;
  adaptive_k c(cfg);
  c.observe(8, 8);
  CHECK(c.best_k() == 0);
}

TEST_CASE("a rejection counts one failed test, full acceptance none") {
  adaptive_k_config cfg;
  cfg.decay = 0.0;
  adaptive_k c(cfg);
  c.observe(4, 1); // one pass, then the rejection: 1 of 2
  CHECK(c.acceptance() == doctest::Approx(0.5));
  c.observe(4, 4); // four passes, no rejection
  CHECK(c.acceptance() == doctest::Approx(1.0));
  c.observe(0, 0); // nothing drafted: nothing learnt
  CHECK(c.acceptance() == doctest::Approx(1.0));
}

TEST_CASE("switched off, k stays at k_max whatever the acceptance") {
  adaptive_k_config cfg;
  cfg.enabled = false;
  cfg.k_max = 3;
  adaptive_k c(cfg);
  for (int i = 0; i < 50; ++i)
    CHECK(step(c, false) == 3);
}

TEST_CASE("configurations out of range are refused by name") {
  auto refuses = [](auto mutate, const char* name) {
    adaptive_k_config cfg;
    mutate(cfg);
    try {
      adaptive_k c(cfg);
      FAIL("accepted a bad " << name);
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find(name) != std::string::npos);
    }
  };
  refuses([](adaptive_k_config& c) { c.k_max = -1; }, "k_max");
  refuses([](adaptive_k_config& c) { c.draft_cost = -0.5; }, "draft_cost");
  refuses([](adaptive_k_config& c) { c.decay = 1.0; }, "decay");
  refuses([](adaptive_k_config& c) { c.prior_acceptance = 1.5; }, "prior_acceptance");
  refuses([](adaptive_k_config& c) { c.prior_weight = 0; }, "prior_weight");
  refuses([](adaptive_k_config& c) { c.probe_interval = 0; }, "probe_interval");
  refuses([](adaptive_k_config& c) { c.probe_k = 0; }, "probe_k");
}
