// An independent recognizer for runtime::structured::grammar, for tests: does the grammar
// derive exactly this string? Memoized sets of end positions per (rule, start), so it
// shares nothing with the matcher it checks (runtime/structured/grammar_matcher).
#pragma once

#include <map>
#include <set>
#include <string_view>
#include <utility>

#include "runtime/structured/grammar.hpp"

namespace troupe::test {

class grammar_recognizer {
 public:
  explicit grammar_recognizer(const runtime::structured::grammar& g) : g_(g) {}

  bool matches(std::string_view text) {
    text_ = text;
    memo_.clear();
    return ends(g_.root(), 0).count(text.size()) > 0;
  }

 private:
  using ends_t = std::set<std::size_t>;

  const ends_t& ends(int rule, std::size_t start) {
    const auto key = std::make_pair(rule, start);
    if (auto it = memo_.find(key); it != memo_.end())
      return it->second;
    ends_t out;
    for (const auto& alt : g_.at(rule).alternatives) {
      ends_t here{start};
      for (const auto& e : alt) {
        ends_t next;
        for (auto p : here) {
          if (e.what == runtime::structured::element::kind::bytes) {
            if (p < text_.size() && e.matches(static_cast<std::uint8_t>(text_[p])))
              next.insert(p + 1);
          } else {
            const auto& sub = ends(e.rule, p);
            next.insert(sub.begin(), sub.end());
          }
        }
        here = std::move(next);
        if (here.empty())
          break;
      }
      out.insert(here.begin(), here.end());
    }
    return memo_[key] = std::move(out);
  }

  const runtime::structured::grammar& g_;
  std::string_view text_;
  std::map<std::pair<int, std::size_t>, ends_t> memo_;
};

} // namespace troupe::test
