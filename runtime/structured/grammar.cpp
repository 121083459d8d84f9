// The grammar's builders and its validation (see grammar.hpp).
#include "runtime/structured/grammar.hpp"

#include <algorithm>
#include <functional>
#include <string>

#include "runtime/errors.hpp"
#include "runtime/tokenizer/utf8.hpp"

namespace troupe::runtime::structured {

bool element::matches(std::uint8_t b) const {
  for (const auto& r : ranges)
    if (b >= r.lo && b <= r.hi)
      return true;
  return false;
}

int grammar::add_rule(std::string_view name) {
  std::string unique(name.empty() ? "rule" : name);
  // Names only show in messages; a suffix keeps them telling which rule is meant.
  if (std::any_of(rules_.begin(), rules_.end(), [&](const rule& r) { return r.name == unique; }))
    unique += "_" + std::to_string(rules_.size());
  rules_.push_back({std::move(unique), {}});
  return static_cast<int>(rules_.size() - 1);
}

void grammar::add_alternative(int rule_id, sequence alternative) {
  elements_ += alternative.size() + 1;
  if (elements_ > max_grammar_elements)
    throw invalid_argument_error("the constraint compiles to more than " + std::to_string(max_grammar_elements) +
                                     " grammar elements; simplify it (fewer or smaller repetition bounds, "
                                     "fewer alternatives)",
                                 "structured_output");
  rules_.at(static_cast<std::size_t>(rule_id)).alternatives.push_back(std::move(alternative));
}

int grammar::add_rule(std::string_view name, std::vector<sequence> alternatives) {
  const int id = add_rule(name);
  for (auto& a : alternatives)
    add_alternative(id, std::move(a));
  return id;
}

sequence grammar::literal(std::string_view text) {
  sequence s;
  s.reserve(text.size());
  for (const char c : text)
    s.push_back(element::byte(static_cast<std::uint8_t>(c)));
  return s;
}

element grammar::repeat(std::string_view name, sequence item, int min, int max) {
  if (min < 0 || (max >= 0 && max < min))
    throw invalid_argument_error("a repetition's bounds must satisfy 0 <= min <= max, got {" + std::to_string(min) +
                                     "," + std::to_string(max) + "}",
                                 "structured_output");
  if (min > max_repeat_bound || max > max_repeat_bound)
    throw invalid_argument_error("repetition bounds above " + std::to_string(max_repeat_bound) + " are not supported",
                                 "structured_output");
  const std::string base(name);
  // The item once, as a rule, so that repeating it costs one element per copy.
  const int one = add_rule(base + "_item", {item});
  // The optional tail: max - min nested optionals, or a right-recursive star.
  sequence tail;
  if (max < 0) {
    const int star_rule = add_rule(base + "_star");
    add_alternative(star_rule, {element::ref(one), element::ref(star_rule)});
    add_alternative(star_rule, {});
    tail.push_back(element::ref(star_rule));
  } else if (max > min) {
    // x{0,n} = (x (x (...)?)?)?: each level one rule, so the matcher's stacks stay shallow.
    int inner = -1;
    for (int k = 0; k < max - min; ++k) {
      const int level = add_rule(base + "_opt");
      sequence body{element::ref(one)};
      if (inner >= 0)
        body.push_back(element::ref(inner));
      add_alternative(level, std::move(body));
      add_alternative(level, {});
      inner = level;
    }
    tail.push_back(element::ref(inner));
  }
  sequence whole;
  for (int k = 0; k < min; ++k)
    whole.push_back(element::ref(one));
  whole.insert(whole.end(), tail.begin(), tail.end());
  return element::ref(add_rule(base, {std::move(whole)}));
}

element grammar::choice(std::string_view name, std::vector<sequence> alternatives) {
  return element::ref(add_rule(name, std::move(alternatives)));
}

namespace {

// The UTF-8 byte length of a code point.
int utf8_length(char32_t c) {
  return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}

char32_t max_of_length(int n) {
  return n == 1 ? 0x7F : n == 2 ? 0x7FF : n == 3 ? 0xFFFF : 0x10FFFF;
}

std::string encode(char32_t c) {
  std::string out;
  tokenizer_detail::append_char(out, c);
  return out;
}

// [lo, hi] of one UTF-8 length as byte-range sequences: split until each byte position
// ranges independently (the classic range splitting of UTF-8 automata).
void split_same_length(char32_t lo, char32_t hi, std::vector<sequence>& out) {
  const int n = utf8_length(lo);
  for (int i = 1; i < n; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1; // the low 6*i bits: continuation bytes
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_same_length(lo, lo | m, out);
        split_same_length((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split_same_length(lo, (hi & ~m) - 1, out);
        split_same_length(hi & ~m, hi, out);
        return;
      }
    }
  }
  const auto a = encode(lo), b = encode(hi);
  sequence s;
  for (std::size_t k = 0; k < a.size(); ++k)
    s.push_back(element::any_of({{static_cast<std::uint8_t>(a[k]), static_cast<std::uint8_t>(b[k])}}));
  out.push_back(std::move(s));
}

} // namespace

std::vector<sequence> utf8_sequences(char32_t lo, char32_t hi) {
  std::vector<sequence> out;
  hi = std::min<char32_t>(hi, 0x10FFFF);
  if (lo > hi)
    return out;
  // Surrogates are no code points of UTF-8 text.
  if (lo <= 0xDFFF && hi >= 0xD800) {
    if (lo < 0xD800)
      for (auto& s : utf8_sequences(lo, 0xD7FF))
        out.push_back(std::move(s));
    if (hi > 0xDFFF)
      for (auto& s : utf8_sequences(0xE000, hi))
        out.push_back(std::move(s));
    return out;
  }
  for (char32_t start = lo; start <= hi;) {
    const char32_t end = std::min(hi, max_of_length(utf8_length(start)));
    split_same_length(start, end, out);
    start = end + 1;
  }
  return out;
}

element grammar::code_points(std::string_view name, std::vector<code_point_range> ranges, bool negated) {
  std::sort(ranges.begin(), ranges.end(), [](const auto& a, const auto& b) { return a.lo < b.lo; });
  std::vector<code_point_range> merged;
  for (const auto& r : ranges) {
    if (r.lo > r.hi)
      continue;
    if (!merged.empty() && r.lo <= merged.back().hi + 1)
      merged.back().hi = std::max(merged.back().hi, r.hi);
    else
      merged.push_back(r);
  }
  if (negated) {
    std::vector<code_point_range> complement;
    char32_t next = 0;
    for (const auto& r : merged) {
      if (r.lo > next)
        complement.push_back({next, r.lo - 1});
      next = r.hi + 1;
    }
    if (next <= 0x10FFFF)
      complement.push_back({next, 0x10FFFF});
    merged = std::move(complement);
  }
  // Single bytes go into one element; longer encodings become alternatives.
  std::vector<byte_range> ascii;
  std::vector<sequence> alternatives;
  for (const auto& r : merged)
    for (auto& s : utf8_sequences(r.lo, r.hi)) {
      if (s.size() == 1)
        ascii.insert(ascii.end(), s[0].ranges.begin(), s[0].ranges.end());
      else
        alternatives.push_back(std::move(s));
    }
  if (!ascii.empty())
    alternatives.insert(alternatives.begin(), sequence{element::any_of(std::move(ascii))});
  if (alternatives.empty())
    throw invalid_argument_error("a character class matches no character", "structured_output");
  return choice(name, std::move(alternatives));
}

void grammar::validate() const {
  if (root_ < 0 || root_ >= static_cast<int>(rules_.size()))
    throw invalid_argument_error("the grammar has no root rule", "structured_output");
  for (const auto& r : rules_) {
    if (r.alternatives.empty())
      throw invalid_argument_error("grammar rule '" + r.name + "' is referenced but never defined",
                                   "structured_output");
    for (const auto& alt : r.alternatives)
      for (const auto& e : alt)
        if (e.what == element::kind::rule && (e.rule < 0 || e.rule >= static_cast<int>(rules_.size())))
          throw invalid_argument_error("grammar rule '" + r.name + "' refers to an undefined rule",
                                       "structured_output");
        else if (e.what == element::kind::bytes && e.ranges.empty())
          throw invalid_argument_error("grammar rule '" + r.name + "' has an empty character set", "structured_output");
  }
  // Nullable rules: a fixpoint over "some alternative is all nullable rules".
  const auto n = rules_.size();
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t i = 0; i < n; ++i) {
      if (nullable[i])
        continue;
      for (const auto& alt : rules_[i].alternatives)
        if (std::all_of(alt.begin(), alt.end(), [&](const element& e) {
              return e.what == element::kind::rule && nullable[static_cast<std::size_t>(e.rule)];
            })) {
          nullable[i] = true;
          changed = true;
          break;
        }
    }
  }
  // Left calls: rule -> the rules it can expand before consuming a byte. A cycle among them
  // is left recursion.
  std::vector<std::vector<int>> left(n);
  for (std::size_t i = 0; i < n; ++i)
    for (const auto& alt : rules_[i].alternatives)
      for (const auto& e : alt) {
        if (e.what == element::kind::bytes)
          break;
        left[i].push_back(e.rule);
        if (!nullable[static_cast<std::size_t>(e.rule)])
          break;
      }
  std::vector<int> colour(n, 0); // 0 new, 1 on the path, 2 done
  std::function<void(int)> visit = [&](int r) {
    colour[static_cast<std::size_t>(r)] = 1;
    for (int next : left[static_cast<std::size_t>(r)]) {
      if (colour[static_cast<std::size_t>(next)] == 1)
        throw invalid_argument_error("grammar rule '" + rules_[static_cast<std::size_t>(next)].name +
                                         "' is left-recursive (it can reach itself without matching a "
                                         "character); rewrite it with repetition",
                                     "structured_output");
      if (colour[static_cast<std::size_t>(next)] == 0)
        visit(next);
    }
    colour[static_cast<std::size_t>(r)] = 2;
  };
  for (std::size_t i = 0; i < n; ++i)
    if (colour[i] == 0)
      visit(static_cast<int>(i));
  // (After left recursion, the more telling of the two for a rule that only calls itself.)
  // Productive rules: some alternative of bytes and productive rules. A root that is not
  // productive derives no finite string: no output could ever complete.
  std::vector<bool> productive(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t i = 0; i < n; ++i) {
      if (productive[i])
        continue;
      for (const auto& alt : rules_[i].alternatives)
        if (std::all_of(alt.begin(), alt.end(), [&](const element& e) {
              return e.what == element::kind::bytes || productive[static_cast<std::size_t>(e.rule)];
            })) {
          productive[i] = true;
          changed = true;
          break;
        }
    }
  }
  if (!productive[static_cast<std::size_t>(root_)])
    throw invalid_argument_error("grammar rule '" + rules_[static_cast<std::size_t>(root_)].name +
                                     "' derives no finite string: every derivation recurses for ever",
                                 "structured_output");
}

} // namespace troupe::runtime::structured
