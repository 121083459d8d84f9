// Moving averages of the two kinds of decode step.
#include "runtime/speculation_cost.hpp"

#include <algorithm>

namespace troupe::runtime {

namespace {
void blend(double& average, bool& seen, double value, double weight) {
  average = seen ? (1.0 - weight) * average + weight * value : value;
  seen = true;
}
} // namespace

void speculation_cost::observe_plain(double wall_us) {
  if (wall_us > 0)
    blend(plain_us_, seen_plain_, wall_us, weight);
}

void speculation_cost::observe_speculative(double wall_us, double mean_drafted) {
  if (wall_us <= 0 || mean_drafted <= 0)
    return;
  bool seen = seen_speculative_;
  blend(speculative_us_, seen_speculative_, wall_us, weight);
  blend(drafted_, seen, mean_drafted, weight);
}

double speculation_cost::per_draft_token(double fallback) const {
  if (!seen_plain_ || !seen_speculative_)
    return fallback;
  return std::max(0.0, speculative_us_ / plain_us_ - 1.0) / std::max(1.0, drafted_);
}

} // namespace troupe::runtime
