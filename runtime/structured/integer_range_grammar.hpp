// Numeric bounds as digit patterns: the integers of a range split on the first digit that
// differs, as numeric ranges are written in regexes, and the plain decimals a range contains.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "runtime/structured/grammar.hpp"

namespace troupe::runtime::structured {

// The bounds of a numeric range: the least and greatest integers allowed (lo, hi), and
// the integers next inside the bounds themselves, exclusive or not (edges: ceil of the
// lower, floor of the upper), absent where unbounded.
struct int_bounds {
  std::optional<std::int64_t> lo, hi, lo_edge, hi_edge;
};

// Integers in [lo, hi] (either side may be unbounded), one alternative per digit pattern.
std::vector<sequence> integer_range(grammar& g, std::optional<std::int64_t> lo, std::optional<std::int64_t> hi);

// The integers in `b`, and k.ddd where k.ddd lies inside for every fraction: plain
// decimals that need no comparison of fraction digits against the bounds (a subset
// of the valid numbers when a bound is not an integer; no exponents). Empty when the
// bounds are too narrow to hold any of these.
std::vector<sequence> bounded_decimals(grammar& g, const int_bounds& b);

} // namespace troupe::runtime::structured
