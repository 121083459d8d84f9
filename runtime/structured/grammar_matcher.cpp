// The grammar's stack-set matcher (see grammar_matcher.hpp).
#include "runtime/structured/grammar_matcher.hpp"

#include <algorithm>
#include <string>

#include "runtime/errors.hpp"

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
  // Each rule once more as a tail of its own: [rule, end]. Every "this rule, then nothing more
  // in this alternative" continuation is pushed as that one position (continuation()), so
  // stacks that differ only in which alternative they go on in merge (a repetition's first
  // copy and its later ones, nested: otherwise 2^depth stacks that mean the same).
  tails_.resize(g.rules().size());
  for (std::size_t r = 0; r < g.rules().size(); ++r) {
    tails_[r] = static_cast<std::uint32_t>(flat_.size());
    flat_.push_back({flat_element::kind::rule, static_cast<std::int32_t>(r)});
    flat_.push_back({flat_element::kind::end, 0});
  }
}

bool grammar_matcher::continuation(std::uint32_t pos, std::uint32_t& next) const {
  const auto& e = flat_[pos + 1];
  if (e.what == flat_element::kind::end)
    return false;
  next = e.what == flat_element::kind::rule && flat_[pos + 2].what == flat_element::kind::end
             ? tails_[static_cast<std::size_t>(e.value)]
             : pos + 1;
  return true;
}

namespace {

[[noreturn]] void too_ambiguous(std::size_t bound) {
  throw invalid_argument_error("the constraint is too ambiguous to follow: its parse state after this output needs "
                               "more than " +
                                   std::to_string(bound) +
                                   " stack entries (an ambiguous grammar: many ways to have read the same bytes, "
                                   "each with its own future); simplify it",
                               "structured_output");
}

} // namespace

// Expands the stack until its top is a byte element (or it is empty), appending every
// result: a rule on top becomes one stack per alternative, above where the caller goes on.
void grammar_matcher::expand(std::vector<std::uint32_t>& stack, std::vector<std::vector<std::uint32_t>>& out,
                             std::size_t& entries) const {
  while (!stack.empty() && flat_[stack.back()].what == flat_element::kind::end)
    stack.pop_back();
  if (stack.empty() || flat_[stack.back()].what == flat_element::kind::bytes) {
    entries += stack.size() + 1;
    if (entries > max_step_entries)
      too_ambiguous(max_step_entries);
    out.push_back(stack);
    return;
  }
  const auto pos = stack.back();
  const auto rule = static_cast<std::size_t>(flat_[pos].value);
  stack.pop_back();
  // Where this alternative goes on after the rule; an end is never left on a stack.
  if (std::uint32_t next = 0; continuation(pos, next))
    stack.push_back(next);
  // Each alternative starts from this stack as it is now: expanding one may pop below it
  // (an empty alternative goes on into the continuation), so the stack is restored from a
  // copy, not just cut back to its size.
  const auto caller = stack;
  for (const auto start : alternatives_[rule]) {
    stack = caller;
    stack.push_back(start);
    expand(stack, out, entries);
  }
}

void grammar_matcher::normalise(match_state& s) const {
  std::sort(s.stacks.begin(), s.stacks.end());
  s.stacks.erase(std::unique(s.stacks.begin(), s.stacks.end()), s.stacks.end());
  std::size_t entries = 0;
  for (const auto& stack : s.stacks)
    entries += stack.size() + 1;
  if (entries > max_state_entries)
    too_ambiguous(max_state_entries);
}

match_state grammar_matcher::start() const {
  match_state s;
  std::vector<std::uint32_t> stack;
  std::size_t entries = 0;
  for (const auto alt : alternatives_[static_cast<std::size_t>(root_)]) {
    stack.assign(1, alt);
    expand(stack, s.stacks, entries);
  }
  normalise(s);
  return s;
}

match_state grammar_matcher::advance(const match_state& s, std::uint8_t byte) const {
  match_state next;
  std::vector<std::uint32_t> stack;
  std::size_t entries = 0; // before duplicates go: a bound on the work as well as the memory
  for (const auto& st : s.stacks) {
    if (st.empty())
      continue;
    const auto pos = st.back();
    if (!set_has(flat_[pos].value, byte))
      continue;
    stack.assign(st.begin(), st.end() - 1);
    if (std::uint32_t next = 0; continuation(pos, next))
      stack.push_back(next);
    expand(stack, next.stacks, entries);
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
