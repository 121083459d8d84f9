// When each request of a benchmark is sent: gaps drawn from a gamma distribution
// with mean 1/rate, as vLLM's benchmark does (burstiness 1 gives a Poisson process).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace troupe::bench {

struct arrival_options {
  double request_rate = std::numeric_limits<double>::infinity(); // requests/s; inf: all at t=0
  // Gamma shape: 1 = Poisson; < 1 burstier (clumps and long pauses); > 1 steadier.
  double burstiness = 1.0;
  std::uint64_t seed = 0;
};

class arrival_schedule {
 public:
  // Throws std::invalid_argument for a rate or burstiness that is not > 0.
  explicit arrival_schedule(const arrival_options& options);

  // Seconds between one arrival and the next: 0 when the rate is infinite.
  double next_gap();

  // The send times of n requests in seconds from the start: the first at 0, each
  // next one a gap later (vLLM also sends before it first sleeps).
  std::vector<double> offsets(std::size_t n);

  bool unlimited() const { return unlimited_; }

 private:
  bool unlimited_;
  std::mt19937_64 rng_;
  std::gamma_distribution<double> gap_;
};

} // namespace troupe::bench
