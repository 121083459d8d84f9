// The speculation-length controller: a decayed acceptance estimate, the
// Leviathan et al. expected-length formula, and periodic probing at k = 0.
#include "runtime/adaptive_k.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace troupe::runtime {

namespace {
void require(bool ok, const char* field, const char* allowed) {
  if (!ok)
    throw std::invalid_argument(std::string("adaptive_k: ") + field + " must be " + allowed);
}
} // namespace

adaptive_k::adaptive_k(const adaptive_k_config& config) : config_(config) {
  require(config.k_max >= 0, "k_max", ">= 0");
  require(config.draft_cost >= 0.0, "draft_cost", ">= 0");
  require(config.decay >= 0.0 && config.decay < 1.0, "decay", "in [0, 1)");
  require(config.prior_acceptance >= 0.0 && config.prior_acceptance <= 1.0, "prior_acceptance", "in [0, 1]");
  require(config.prior_weight > 0.0, "prior_weight", "> 0");
  require(config.probe_interval >= 1, "probe_interval", ">= 1");
  require(config.probe_k >= 1, "probe_k", ">= 1");
  passed_ = config.prior_acceptance * config.prior_weight;
  tests_ = config.prior_weight;
  probe_interval_ = config.probe_interval;
}

double adaptive_k::expected_tokens(double alpha, int k) {
  // The geometric sum 1 + alpha + ... + alpha^k; the closed form divides by ~0 near alpha = 1.
  if (alpha >= 1.0 - 1e-9)
    return k + 1.0;
  return (1.0 - std::pow(alpha, k + 1)) / (1.0 - alpha);
}

void adaptive_k::set_draft_cost(double c) {
  if (c >= 0.0 && std::isfinite(c))
    config_.draft_cost = c;
}

int adaptive_k::best_k() const {
  const double alpha = acceptance();
  int best = 0;
  double best_rate = 1.0; // k = 0: one token per target step
  for (int k = 1; k <= config_.k_max; ++k) {
    double rate = expected_tokens(alpha, k) / (1.0 + config_.draft_cost * k);
    if (rate > best_rate) {
      best = k;
      best_rate = rate;
    }
  }
  return best;
}

int adaptive_k::next_k() {
  if (!config_.enabled)
    return config_.k_max;
  int k = best_k();
  if (k > 0 || config_.k_max == 0) {
    idle_steps_ = 0;
    return k;
  }
  // Without a probe a sequence at k = 0 would never be measured again. Probes
  // that keep failing back off (the interval doubles, up to 16 times the
  // configured one): a draft that catches up after a long pause is not free.
  if (++idle_steps_ >= probe_interval_) {
    idle_steps_ = 0;
    probing_ = true;
    return std::min(config_.probe_k, config_.k_max);
  }
  return 0;
}

void adaptive_k::observe(int proposed, int accepted) {
  if (proposed <= 0)
    return;
  accepted = std::clamp(accepted, 0, proposed);
  if (probing_) {
    probing_ = false;
    probe_interval_ = accepted == 0 ? std::min(probe_interval_ * 2, config_.probe_interval * 16) : config_.probe_interval;
  }
  // A rejection ends the tests, so a rejected step ran one more test than it passed.
  const int tests = accepted < proposed ? accepted + 1 : accepted;
  passed_ = config_.decay * passed_ + accepted;
  tests_ = config_.decay * tests_ + tests;
}

} // namespace troupe::runtime
