// Numeric bounds as digit patterns, for JSON Schema's minimum / maximum keywords.
#include "runtime/structured/integer_range_grammar.hpp"

#include <algorithm>
#include <string>

#include "runtime/structured/json_value_grammar.hpp"

namespace troupe::runtime::structured {

namespace {

// Digit strings of one length n from a to b (a <= b, leading zeros kept): split on the
// first digit that differs, as numeric ranges are written in regexes.
void same_length(const std::string& a, const std::string& b, sequence prefix, std::vector<sequence>& out) {
  if (a.empty()) {
    out.push_back(std::move(prefix));
    return;
  }
  const std::size_t rest = a.size() - 1;
  const bool low_zeros = a.find_first_not_of('0', 1) == std::string::npos;
  const bool high_nines = b.find_first_not_of('9', 1) == std::string::npos;
  auto digits = [](char lo, char hi) {
    return element::any_of({{static_cast<std::uint8_t>(lo), static_cast<std::uint8_t>(hi)}});
  };
  if (a[0] == b[0]) {
    prefix.push_back(digits(a[0], a[0]));
    same_length(a.substr(1), b.substr(1), std::move(prefix), out);
    return;
  }
  if (low_zeros && high_nines) {
    prefix.push_back(digits(a[0], b[0]));
    for (std::size_t i = 0; i < rest; ++i)
      prefix.push_back(digit());
    out.push_back(std::move(prefix));
    return;
  }
  sequence first = prefix;
  first.push_back(digits(a[0], a[0]));
  same_length(a.substr(1), std::string(rest, '9'), std::move(first), out);
  if (a[0] + 1 <= b[0] - 1) {
    sequence middle = prefix;
    middle.push_back(digits(static_cast<char>(a[0] + 1), static_cast<char>(b[0] - 1)));
    for (std::size_t i = 0; i < rest; ++i)
      middle.push_back(digit());
    out.push_back(std::move(middle));
  }
  sequence last = std::move(prefix);
  last.push_back(digits(b[0], b[0]));
  same_length(std::string(rest, '0'), b.substr(1), std::move(last), out);
}

// Decimal magnitudes from a to b (b absent: unbounded), no leading zeros.
std::vector<sequence> magnitudes(grammar& g, std::uint64_t a, std::optional<std::uint64_t> b) {
  std::vector<sequence> out;
  const std::string as = std::to_string(a);
  const std::size_t top = b ? std::to_string(*b).size() : as.size();
  for (std::size_t n = as.size(); n <= top; ++n) {
    const std::string lo = n == as.size() ? as : "1" + std::string(n - 1, '0');
    const std::string hi = b && n == top ? std::to_string(*b) : std::string(n, '9');
    same_length(lo, hi, {}, out);
  }
  if (!b)
    out.push_back({element::any_of({{'1', '9'}}), g.repeat("more_digits", {digit()}, static_cast<int>(as.size()), -1)});
  return out;
}

// "k.ddd" (or "-k.ddd" when `negative`) for integer parts k in [least, most] (most
// absent: unbounded).
void add_fractions(grammar& g, std::vector<sequence>& alts, bool negative, std::int64_t least,
                   std::optional<std::int64_t> most, element fraction) {
  if (most && least > *most)
    return;
  for (auto& m : magnitudes(g, static_cast<std::uint64_t>(least),
                            most ? std::optional(static_cast<std::uint64_t>(*most)) : std::nullopt)) {
    if (negative)
      m.insert(m.begin(), element::byte('-'));
    m.push_back(element::byte('.'));
    m.push_back(fraction);
    alts.push_back(std::move(m));
  }
}

} // namespace

// A '-' and magnitudes for the negative part, magnitudes for the rest.
std::vector<sequence> integer_range(grammar& g, std::optional<std::int64_t> lo, std::optional<std::int64_t> hi) {
  std::vector<sequence> out;
  if (!lo || *lo < 0) {
    const std::uint64_t least = hi && *hi < 0 ? static_cast<std::uint64_t>(-*hi) : 1;
    std::optional<std::uint64_t> most;
    if (lo)
      most = static_cast<std::uint64_t>(-*lo);
    if (!most || least <= *most)
      for (auto& m : magnitudes(g, least, most)) {
        m.insert(m.begin(), element::byte('-'));
        out.push_back(std::move(m));
      }
  }
  if (!hi || *hi >= 0) {
    const std::uint64_t least = lo && *lo > 0 ? static_cast<std::uint64_t>(*lo) : 0;
    std::optional<std::uint64_t> most;
    if (hi)
      most = static_cast<std::uint64_t>(*hi);
    for (auto& m : magnitudes(g, least, most))
      out.push_back(std::move(m));
  }
  return out;
}

std::vector<sequence> bounded_decimals(grammar& g, const int_bounds& b) {
  std::vector<sequence> alts;
  if (!b.lo || !b.hi || *b.lo <= *b.hi)
    alts = integer_range(g, b.lo, b.hi);
  const element any_fraction = g.plus("fraction_digits", {digit()});
  const element nonzero_fraction = g.choice(
      "nonzero_fraction",
      {{g.star("fraction_digits", {digit()}), element::any_of({{'1', '9'}}), g.star("fraction_digits", {digit()})}});
  // "k.ddd" >= k and < k + 1: k from the least allowed integer (or 0) to hi_edge - 1.
  add_fractions(g, alts, false, b.lo ? std::max<std::int64_t>(*b.lo, 0) : 0,
                b.hi_edge ? std::optional(*b.hi_edge - 1) : std::nullopt, any_fraction);
  // An exclusive integer lower bound k: "k.ddd" with a fraction above zero.
  if (b.lo && b.lo_edge && *b.lo > *b.lo_edge && *b.lo_edge >= 0 && (!b.hi_edge || *b.lo_edge < *b.hi_edge))
    add_fractions(g, alts, false, *b.lo_edge, *b.lo_edge, nonzero_fraction);
  // "-m.ddd" <= -m and > -(m + 1): m from the least allowed magnitude (or 0) to -lo_edge - 1.
  add_fractions(g, alts, true, b.hi ? std::max<std::int64_t>(-*b.hi, 0) : 0,
                b.lo_edge ? std::optional(-*b.lo_edge - 1) : std::nullopt, any_fraction);
  // An exclusive integer upper bound -m: "-m.ddd" with a fraction above zero.
  if (b.hi && b.hi_edge && *b.hi < *b.hi_edge && *b.hi_edge <= 0 && (!b.lo_edge || *b.lo_edge < *b.hi_edge))
    add_fractions(g, alts, true, -*b.hi_edge, -*b.hi_edge, nonzero_fraction);
  return alts;
}

} // namespace troupe::runtime::structured
