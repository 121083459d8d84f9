// Gamma-distributed gaps: shape = burstiness, scale = 1/(rate*burstiness), so the
// mean gap is 1/rate whatever the burstiness and only the spread changes.
#include "apps/troupe-bench/load/arrival_schedule.hpp"

#include <cmath>
#include <stdexcept>

namespace troupe::bench {

namespace {
std::gamma_distribution<double> gap_distribution(const arrival_options& o) {
  if (!(o.request_rate > 0))
    throw std::invalid_argument("the request rate must be > 0 (or inf)");
  if (!(o.burstiness > 0) || std::isinf(o.burstiness))
    throw std::invalid_argument("the burstiness must be a finite number > 0");
  if (std::isinf(o.request_rate))
    return std::gamma_distribution<double>(1.0, 1.0); // never drawn
  return std::gamma_distribution<double>(o.burstiness, 1.0 / (o.request_rate * o.burstiness));
}
} // namespace

arrival_schedule::arrival_schedule(const arrival_options& o)
    : unlimited_(std::isinf(o.request_rate)), rng_(o.seed), gap_(gap_distribution(o)) {}

double arrival_schedule::next_gap() {
  return unlimited_ ? 0.0 : gap_(rng_);
}

std::vector<double> arrival_schedule::offsets(std::size_t n) {
  std::vector<double> t(n, 0.0);
  for (std::size_t i = 1; i < n; ++i)
    t[i] = t[i - 1] + next_gap();
  return t;
}

} // namespace troupe::bench
