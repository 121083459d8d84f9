// The grammar's stack-set matcher (see grammar_matcher.hpp).
#include "runtime/structured/grammar_matcher.hpp"

#include <algorithm>

namespace troupe::runtime::structured {

grammar_matcher::grammar_matcher(const grammar& g) : root_(g.root()) {
  alternatives_.resize(g.rules().size());
  for (std::size_t r = 0; r < g.rules().size(); ++r)
    for (const auto& alt : g.rules()[r].alternatives) {
      alternatives_[r].push_back(static_cast<std::uint32_t>(flat_.size()));
      for (const auto& e : alt) {
        if (e.what == element::kind::rule) {
          flat_.push_back({flat_element::kind::rule, e.rule});
          continue;
        }
        std::array<std::uint64_t, 4> bits{};
        for (const auto& range : e.ranges)
          for (int b = range.lo; b <= range.hi; ++b)
            bits[static_cast<std::size_t>(b) >> 6] |= std::uint64_t{1} << (b & 63);
        flat_.push_back({flat_element::kind::bytes, static_cast<std::int32_t>(byte_sets_.size())});
        byte_sets_.push_back(bits);
      }
      flat_.push_back({flat_element::kind::end, 0});
    }
}

// Expands the stack until its top is a byte element (or it is empty), appending every
// result: a rule on top becomes one stack per alternative, above where the caller goes on.
void grammar_matcher::expand(std::vector<std::uint32_t>& stack, std::vector<std::vector<std::uint32_t>>& out) const {
  while (!stack.empty() && flat_[stack.back()].what == flat_element::kind::end)
    stack.pop_back();
  if (stack.empty() || flat_[stack.back()].what == flat_element::kind::bytes) {
    out.push_back(stack);
    return;
  }
  const auto pos = stack.back();
  const auto rule = static_cast<std::size_t>(flat_[pos].value);
  stack.pop_back();
  // Where this alternative goes on after the rule; an end is never left on a stack.
  if (flat_[pos + 1].what != flat_element::kind::end)
    stack.push_back(pos + 1);
  const auto base = stack.size();
  for (const auto start : alternatives_[rule]) {
    stack.resize(base);
    stack.push_back(start);
    expand(stack, out);
  }
}

void grammar_matcher::normalise(match_state& s) const {
  std::sort(s.stacks.begin(), s.stacks.end());
  s.stacks.erase(std::unique(s.stacks.begin(), s.stacks.end()), s.stacks.end());
}

match_state grammar_matcher::start() const {
  match_state s;
  std::vector<std::uint32_t> stack;
  for (const auto alt : alternatives_[static_cast<std::size_t>(root_)]) {
    stack.assign(1, alt);
    expand(stack, s.stacks);
  }
  normalise(s);
  return s;
}

match_state grammar_matcher::advance(const match_state& s, std::uint8_t byte) const {
  match_state next;
  std::vector<std::uint32_t> stack;
  for (const auto& st : s.stacks) {
    if (st.empty())
      continue;
    const auto pos = st.back();
    if (!set_has(flat_[pos].value, byte))
      continue;
    stack.assign(st.begin(), st.end() - 1);
    if (flat_[pos + 1].what != flat_element::kind::end)
      stack.push_back(pos + 1);
    expand(stack, next.stacks);
  }
  normalise(next);
  return next;
}

match_state grammar_matcher::advance(match_state s, std::string_view bytes) const {
  for (const char c : bytes) {
    if (s.dead())
      break;
    s = advance(s, static_cast<std::uint8_t>(c));
  }
  return s;
}

bool grammar_matcher::accepts(const match_state& s) const {
  // Stacks are sorted: an empty one comes first.
  return !s.stacks.empty() && s.stacks.front().empty();
}

bool grammar_matcher::can_take(const match_state& s, std::uint8_t byte) const {
  return std::any_of(s.stacks.begin(), s.stacks.end(),
                     [&](const auto& st) { return !st.empty() && set_has(flat_[st.back()].value, byte); });
}

} // namespace troupe::runtime::structured
