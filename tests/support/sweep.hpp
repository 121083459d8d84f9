// How many cases a randomized sweep (random schemas, random rows) runs. The Release suite runs every
// sweep in full. The sanitizer runs (scripts/test-sanitizers) set $TROUPE_TEST_SWEEP_DIVISOR=4: they
// look for memory errors, undefined behaviour and races in the code paths a sweep takes, which a
// quarter of its cases already takes, at 5-20x the Release cost per case.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <string>

namespace troupe::testing {

// full / $TROUPE_TEST_SWEEP_DIVISOR, at least 1; full when the variable is unset.
inline int sweep_cases(int full) {
  const char* env = std::getenv("TROUPE_TEST_SWEEP_DIVISOR");
  const int divisor = env != nullptr && *env != '\0' ? std::max(1, std::stoi(env)) : 1;
  return std::max(1, full / divisor);
}

} // namespace troupe::testing
