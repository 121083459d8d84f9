// Random strings a runtime::structured::grammar derives, for tests: a random derivation
// that picks alternatives at random until a length or depth budget is spent, then finishes
// every open rule along a shortest way out, so that it always ends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/structured/grammar.hpp"

namespace troupe::test {

class grammar_sampler {
 public:
  // `budget`: output bytes after which derivations head for the end; `max_depth`: rule
  // nesting after which they do too (it bounds the recursion of this sampler).
  explicit grammar_sampler(const runtime::structured::grammar& g, std::size_t budget = 200, int max_depth = 400)
      : g_(g), budget_(budget), max_depth_(max_depth) {
    way_out();
  }

  std::string sample(std::mt19937_64& rng) {
    std::string out;
    expand(g_.root(), rng, out, 0);
    return out;
  }

 private:
  using element = runtime::structured::element;

  // For every rule an alternative that finishes: found in rounds, an alternative counting
  // once all its rules finished in earlier rounds (so following these choices can never
  // cycle), the shortest such one kept.
  void way_out() {
    const auto& rules = g_.rules();
    constexpr std::size_t unknown = std::numeric_limits<std::size_t>::max();
    length_.assign(rules.size(), unknown);
    exit_.assign(rules.size(), -1);
    for (bool changed = true; changed;) {
      changed = false;
      std::vector<std::size_t> next = length_;
      for (std::size_t r = 0; r < rules.size(); ++r) {
        if (length_[r] != unknown)
          continue;
        for (std::size_t a = 0; a < rules[r].alternatives.size(); ++a) {
          std::size_t len = 0;
          bool done = true;
          for (const auto& e : rules[r].alternatives[a]) {
            if (e.what == element::kind::bytes) {
              ++len;
            } else if (length_[static_cast<std::size_t>(e.rule)] == unknown) {
              done = false;
              break;
            } else {
              len += length_[static_cast<std::size_t>(e.rule)];
            }
          }
          if (done && len < next[r]) {
            next[r] = len;
            exit_[r] = static_cast<int>(a);
            changed = true;
          }
        }
      }
      length_ = std::move(next);
    }
  }

  void expand(int rule, std::mt19937_64& rng, std::string& out, int depth) {
    const auto& alts = g_.at(rule).alternatives;
    std::size_t pick = static_cast<std::size_t>(exit_[static_cast<std::size_t>(rule)]);
    if (out.size() < budget_ && depth < max_depth_)
      pick = std::uniform_int_distribution<std::size_t>(0, alts.size() - 1)(rng);
    for (const auto& e : alts[pick]) {
      if (e.what == element::kind::rule) {
        expand(e.rule, rng, out, depth + 1);
        continue;
      }
      // A byte inside the ranges, each byte equally likely.
      std::size_t total = 0;
      for (const auto& r : e.ranges)
        total += static_cast<std::size_t>(r.hi - r.lo) + 1;
      std::size_t k = std::uniform_int_distribution<std::size_t>(0, total - 1)(rng);
      for (const auto& r : e.ranges) {
        const std::size_t size = static_cast<std::size_t>(r.hi - r.lo) + 1;
        if (k < size) {
          out += static_cast<char>(r.lo + k);
          break;
        }
        k -= size;
      }
    }
  }

  const runtime::structured::grammar& g_;
  std::size_t budget_;
  int max_depth_;
  std::vector<std::size_t> length_;
  std::vector<int> exit_;
};

} // namespace troupe::test
