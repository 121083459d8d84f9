// The regex front end (see regex_grammar.hpp): a recursive-descent parser to a small tree,
// a check of where anchors and possessive quantifiers stand, then rules from the tree.
#include "runtime/structured/regex_grammar.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/errors.hpp"

namespace troupe::runtime::structured {

namespace {

constexpr char32_t max_code_point = 0x10FFFF;

[[noreturn]] void refuse(const std::string& message) {
  throw invalid_argument_error("regex: " + message, "structured_output");
}

std::string at(std::size_t pos) {
  return " at position " + std::to_string(pos);
}

struct node;
using node_ptr = std::shared_ptr<const node>;

struct node {
  enum class kind { empty, chars, concat, alt, repeat, start_anchor, end_anchor };
  kind what = kind::empty;
  std::vector<code_point_range> ranges; // chars: one code point inside them (sorted, merged)
  std::vector<node_ptr> children;       // concat, alt; repeat: the item
  int min = 1, max = 1;                 // repeat; max < 0: unbounded
  bool possessive = false;
  std::size_t pos = 0; // where it starts in the pattern, for messages
};

node_ptr make(node n) {
  return std::make_shared<const node>(std::move(n));
}

node_ptr make_list(node::kind what, std::vector<node_ptr> children, std::size_t pos) {
  if (children.size() == 1)
    return children[0];
  node n;
  n.what = children.empty() ? node::kind::empty : what;
  n.children = std::move(children);
  n.pos = pos;
  return make(std::move(n));
}

std::vector<code_point_range> normalized(std::vector<code_point_range> r) {
  std::sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.lo < b.lo; });
  std::vector<code_point_range> out;
  for (const auto& x : r) {
    if (!out.empty() && x.lo <= out.back().hi + 1)
      out.back().hi = std::max(out.back().hi, x.hi);
    else
      out.push_back(x);
  }
  return out;
}

std::vector<code_point_range> complement(const std::vector<code_point_range>& r) {
  std::vector<code_point_range> out;
  char32_t next = 0;
  for (const auto& x : normalized(r)) {
    if (x.lo > next)
      out.push_back({next, x.lo - 1});
    next = x.hi + 1;
  }
  if (next <= max_code_point)
    out.push_back({next, max_code_point});
  return out;
}

// The ASCII meanings of \d \w \s, as PCRE has them without UCP (and JSON schema's
// ECMAScript has them for \d and \w).
std::vector<code_point_range> class_escape(char c) {
  std::vector<code_point_range> r;
  switch (c) {
    case 'd':
    case 'D':
      r = {{'0', '9'}};
      break;
    case 'w':
    case 'W':
      r = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
      break;
    default: // s, S
      r = {{'\t', '\r'}, {' ', ' '}};
  }
  return c >= 'A' && c <= 'Z' ? complement(r) : r;
}

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

bool is_alnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

class parser {
 public:
  explicit parser(std::string_view pattern) : p_(pattern) {}

  node_ptr parse() {
    auto root = alternation(0);
    if (i_ < p_.size()) // alternation() stops only at the end or at a ')'
      refuse("unbalanced parenthesis: ')'" + at(i_) + " has no matching '('");
    return root;
  }

 private:
  // What one escape or class item stands for: a set of code points, and whether it was a
  // class escape (\d ...), which cannot end a range.
  struct item {
    std::vector<code_point_range> ranges;
    bool is_class = false;
  };

  bool more() const { return i_ < p_.size(); }
  char peek() const { return p_[i_]; }
  bool next_is(std::string_view s) const { return p_.substr(i_, s.size()) == s; }

  node_ptr alternation(int depth) {
    const auto start = i_;
    std::vector<node_ptr> branches{concatenation(depth)};
    while (more() && peek() == '|') {
      ++i_;
      branches.push_back(concatenation(depth));
    }
    return make_list(node::kind::alt, std::move(branches), start);
  }

  node_ptr concatenation(int depth) {
    const auto start = i_;
    std::vector<node_ptr> items;
    while (more() && peek() != '|' && peek() != ')')
      items.push_back(quantified(atom(depth)));
    return make_list(node::kind::concat, std::move(items), start);
  }

  // {m}, {m,} or {m,n} at i_: the bounds and the position after it, or nothing when the
  // brace starts no repetition.
  bool bounds(int& min, int& max, std::size_t& end) const {
    std::size_t k = i_ + 1;
    auto number = [&](int& out) {
      const auto first = k;
      long value = 0;
      while (k < p_.size() && p_[k] >= '0' && p_[k] <= '9') {
        value = std::min<long>(value * 10 + (p_[k] - '0'), long{max_repeat_bound} + 1);
        ++k;
      }
      out = static_cast<int>(value);
      return k > first;
    };
    if (!number(min))
      return false;
    max = min;
    if (k < p_.size() && p_[k] == ',') {
      ++k;
      if (!number(max))
        max = -1;
    }
    if (k >= p_.size() || p_[k] != '}')
      return false;
    end = k + 1;
    return true;
  }

  bool at_quantifier() const {
    if (!more())
      return false;
    if (peek() == '*' || peek() == '+' || peek() == '?')
      return true;
    int min = 0, max = 0;
    std::size_t end = 0;
    return peek() == '{' && bounds(min, max, end);
  }

  node_ptr quantified(node_ptr atom) {
    if (!at_quantifier())
      return atom;
    const auto start = i_;
    if (atom->what == node::kind::start_anchor || atom->what == node::kind::end_anchor)
      refuse("quantifier '" + std::string(1, peek()) + "'" + at(i_) + " follows an anchor: there is nothing to repeat");
    node n;
    n.what = node::kind::repeat;
    n.pos = start;
    switch (peek()) {
      case '*':
        n.min = 0, n.max = -1, ++i_;
        break;
      case '+':
        n.min = 1, n.max = -1, ++i_;
        break;
      case '?':
        n.min = 0, n.max = 1, ++i_;
        break;
      default: {
        std::size_t end = 0;
        bounds(n.min, n.max, end);
        const auto text = std::string(p_.substr(i_, end - i_));
        if (n.min > max_repeat_bound || n.max > max_repeat_bound)
          refuse("repetition " + text + at(i_) + " has a bound above " + std::to_string(max_repeat_bound));
        if (n.max >= 0 && n.max < n.min)
          refuse("repetition " + text + at(i_) + " has its minimum above its maximum");
        i_ = end;
      }
    }
    // A lazy suffix only changes which match a backtracking engine finds first.
    if (more() && peek() == '?') {
      ++i_;
    } else if (more() && peek() == '+') {
      n.possessive = true;
      ++i_;
    }
    if (at_quantifier())
      refuse("quantifier '" + std::string(1, peek()) + "'" + at(i_) +
             " follows another quantifier; put the repeated part in a group to repeat it again");
    n.children = {std::move(atom)};
    return make(std::move(n));
  }

  node_ptr chars(std::vector<code_point_range> ranges, std::size_t pos) {
    node n;
    n.what = node::kind::chars;
    n.ranges = normalized(std::move(ranges));
    n.pos = pos;
    return make(std::move(n));
  }

  node_ptr atom(int depth) {
    const auto start = i_;
    const char c = peek();
    switch (c) {
      case '(':
        return group(depth);
      case '[':
        return char_class();
      case '.':
        ++i_;
        return chars({{0, '\n' - 1}, {'\n' + 1, max_code_point}}, start);
      case '^':
      case '$': {
        ++i_;
        node n;
        n.what = c == '^' ? node::kind::start_anchor : node::kind::end_anchor;
        n.pos = start;
        return make(std::move(n));
      }
      case '*':
      case '+':
      case '?':
        refuse("quantifier '" + std::string(1, c) + "'" + at(i_) + " has nothing to repeat");
      case '{':
        if (at_quantifier())
          refuse("quantifier '{'" + at(i_) + " has nothing to repeat");
        refuse("'{'" + at(i_) + " starts no repetition {m}, {m,} or {m,n}; write \\{ for a literal brace");
      case '}':
        refuse("unbalanced brace: '}'" + at(i_) + " closes nothing; write \\} for a literal brace");
      case ']':
        refuse("unbalanced bracket: ']'" + at(i_) + " closes no class; write \\] for a literal bracket");
      case '\\': {
        auto e = escape(false);
        return chars(std::move(e.ranges), start);
      }
      default: {
        const char32_t cp = code_point();
        return chars({{cp, cp}}, start);
      }
    }
  }

  node_ptr group(int depth) {
    const auto start = i_;
    if (depth + 1 > max_regex_nesting)
      refuse("groups nested deeper than " + std::to_string(max_regex_nesting) + at(start));
    ++i_;
    if (more() && peek() == '?') {
      if (next_is("?:")) {
        i_ += 2;
      } else if (next_is("?=") || next_is("?!") || next_is("?<=") || next_is("?<!")) {
        const auto len = p_[i_ + 1] == '<' ? 3 : 2;
        refuse("lookaround '(" + std::string(p_.substr(i_, len)) + "'" + at(start) + " is not supported");
      } else if (next_is("?<") || next_is("?P<")) {
        // A named group is a plain group: names matter only to backreferences, which are refused.
        i_ += next_is("?<") ? 2 : 3;
        const auto name_start = i_;
        while (more() && (is_alnum(peek()) || peek() == '_'))
          ++i_;
        if (i_ == name_start || !more() || peek() != '>')
          refuse("named group" + at(start) + " needs a name of letters, digits and '_' closed by '>'");
        ++i_;
      } else if (next_is("?>")) {
        refuse("atomic group '(?>'" + at(start) + " is not supported");
      } else if (next_is("?P=") || next_is("?P>") || next_is("?&") || next_is("?R") ||
                 (i_ + 1 < p_.size() && p_[i_ + 1] >= '0' && p_[i_ + 1] <= '9')) {
        refuse("backreference or recursion '(" + std::string(p_.substr(i_, 2)) + "'" + at(start) + " is not supported");
      } else {
        refuse("group syntax '(" + std::string(p_.substr(i_, 2)) + "'" + at(start) +
               " is not supported (inline flags, conditionals and comments are not); use (...), (?:...) or "
               "(?<name>...)");
      }
    }
    auto inner = alternation(depth + 1);
    if (!more())
      refuse("unbalanced parenthesis: '('" + at(start) + " is never closed");
    ++i_; // ')'
    return inner;
  }

  // One code point of the pattern's UTF-8 at i_.
  char32_t code_point() {
    const auto b = static_cast<unsigned char>(p_[i_]);
    int n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i_ + static_cast<std::size_t>(n) > p_.size())
      refuse("the pattern is not valid UTF-8" + at(i_));
    char32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(p_[i_ + static_cast<std::size_t>(k)]);
      if ((c >> 6) != 0x2)
        refuse("the pattern is not valid UTF-8" + at(i_));
      cp = (cp << 6) | (c & 0x3F);
    }
    const char32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > max_code_point || (cp >= 0xD800 && cp <= 0xDFFF))
      refuse("the pattern is not valid UTF-8" + at(i_));
    i_ += static_cast<std::size_t>(n);
    return cp;
  }

  // Hex digits after \x or \u: exactly `count` of them, or any number inside braces.
  char32_t hex(std::size_t escape_start, std::size_t count) {
    const auto text = "'\\" + std::string(1, p_[escape_start + 1]) + "'";
    unsigned long value = 0;
    auto digit = [&](char c) {
      value = std::min<unsigned long>(
          value * 16 + static_cast<unsigned long>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10), 0x110000);
    };
    if (more() && peek() == '{') {
      const auto first = ++i_;
      while (more() && is_hex(peek()))
        digit(p_[i_++]);
      if (i_ == first || !more() || peek() != '}')
        refuse("escape " + text + at(escape_start) + " needs hex digits closed by '}'");
      ++i_;
    } else {
      for (std::size_t k = 0; k < count; ++k) {
        if (!more() || !is_hex(peek()))
          refuse("escape " + text + at(escape_start) + " needs " + std::to_string(count) + " hex digits");
        digit(p_[i_++]);
      }
    }
    if (value > max_code_point)
      refuse("escape " + text + at(escape_start) + " is above U+10FFFF");
    return static_cast<char32_t>(value);
  }

  // The escape at i_ (a backslash).
  item escape(bool in_class) {
    const auto start = i_++;
    if (!more())
      refuse("the pattern ends with a lone backslash" + at(start));
    const char c = peek();
    auto one = [](char32_t cp) { return item{{{cp, cp}}, false}; };
    const auto text = "'\\" + std::string(1, c) + "'";
    switch (c) {
      case 'd':
      case 'D':
      case 'w':
      case 'W':
      case 's':
      case 'S':
        ++i_;
        return {class_escape(c), true};
      case 'n':
        return ++i_, one('\n');
      case 't':
        return ++i_, one('\t');
      case 'r':
        return ++i_, one('\r');
      case 'f':
        return ++i_, one('\f');
      case 'v':
        return ++i_, one('\v');
      case 'x':
      case 'u': {
        ++i_;
        char32_t cp = hex(start, c == 'x' ? 2 : 4);
        // JavaScript writes astral characters as surrogate pairs: \uD83D\uDE00.
        if (cp >= 0xD800 && cp <= 0xDBFF && next_is("\\u")) {
          const auto low_start = i_;
          i_ += 2;
          const char32_t low = hex(low_start, 4);
          if (low >= 0xDC00 && low <= 0xDFFF)
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          else
            i_ = low_start;
        }
        if (cp >= 0xD800 && cp <= 0xDFFF)
          refuse("escape " + text + at(start) + " is a lone surrogate, not a character");
        return one(cp);
      }
      case '0':
        if (i_ + 1 < p_.size() && p_[i_ + 1] >= '0' && p_[i_ + 1] <= '9')
          refuse("octal escape" + at(start) + " is not supported; write \\xHH");
        return ++i_, one(0);
      case 'b':
        if (in_class) // [\b] is a backspace in PCRE and ECMAScript alike
          return ++i_, one('\b');
        refuse("word boundary '\\b'" + at(start) + " is not supported");
      case 'B':
        refuse("word boundary '\\B'" + at(start) + " is not supported");
      case 'k':
      case 'g':
        refuse("backreference " + text + at(start) + " is not supported");
      case 'p':
      case 'P':
        refuse("Unicode property " + text + at(start) + " is not supported; write the ranges in a class");
      case 'A':
      case 'z':
      case 'Z':
      case 'G':
        refuse("anchor " + text + at(start) +
               " is not supported (the whole output must match the pattern, so it needs no anchors)");
      default:
        break;
    }
    if (c >= '1' && c <= '9')
      refuse("backreference " + text + at(start) + " is not supported");
    if (is_alnum(c))
      refuse("unknown escape " + text + at(start));
    // Any other escaped character stands for itself (\. \\ \/ \- \* \[ ...).
    const char32_t cp = code_point();
    return one(cp);
  }

  node_ptr char_class() {
    const auto start = i_++;
    bool negated = false;
    if (more() && peek() == '^') {
      negated = true;
      ++i_;
    }
    if (more() && peek() == ']')
      refuse(std::string(negated ? "class '[^]'" : "empty class '[]'") + at(start) +
             " is not supported; write \\] for a bracket inside a class");
    std::vector<code_point_range> ranges;
    auto unclosed = [&] { refuse("unbalanced bracket: '['" + at(start) + " is never closed"); };
    auto class_item = [&]() -> item {
      if (!more())
        unclosed();
      if (peek() == '\\')
        return escape(true);
      if (next_is("[:") || next_is("[=") || next_is("[."))
        refuse("POSIX class '" + std::string(p_.substr(i_, 2)) + "'" + at(i_) +
               " is not supported; write the ranges instead");
      const char32_t cp = code_point();
      return {{{cp, cp}}, false};
    };
    for (;;) {
      if (!more())
        unclosed();
      if (peek() == ']')
        break;
      const auto item_start = i_;
      auto lo = class_item();
      if (more() && peek() == '-' && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        auto hi = class_item();
        const auto text = std::string(p_.substr(item_start, i_ - item_start));
        if (lo.is_class || hi.is_class)
          refuse("range '" + text + "'" + at(item_start) + " has a class escape as an end");
        if (lo.ranges[0].lo > hi.ranges[0].lo)
          refuse("range '" + text + "'" + at(item_start) + " is out of order");
        ranges.push_back({lo.ranges[0].lo, hi.ranges[0].lo});
      } else {
        ranges.insert(ranges.end(), lo.ranges.begin(), lo.ranges.end());
      }
    }
    ++i_; // ']'
    if (negated)
      ranges = complement(ranges);
    // Surrogates are no characters: a class of only them matches nothing.
    ranges = normalized(ranges);
    const bool any =
        std::any_of(ranges.begin(), ranges.end(), [](const auto& r) { return r.lo < 0xD800 || r.hi > 0xDFFF; });
    if (!any)
      refuse("class '" + std::string(p_.substr(start, i_ - start)) + "'" + at(start) + " matches no character");
    return chars(std::move(ranges), start);
  }

  std::string_view p_;
  std::size_t i_ = 0;
};

bool single_character(const node& n) {
  return n.what == node::kind::chars;
}

// Anchors are zero-width: a `^` is a no-op where nothing can have been matched before it,
// a `$` where nothing can follow; elsewhere they would make the pattern stricter in ways
// the grammar does not express. A possessive quantifier never gives back what it took; on
// one character at the very end that is what a full match does anyway.
void check_positions(const node& n, bool at_start, bool at_end) {
  switch (n.what) {
    case node::kind::start_anchor:
      if (!at_start)
        refuse("anchor '^'" + at(n.pos) + " is only supported at the start of the pattern");
      break;
    case node::kind::end_anchor:
      if (!at_end)
        refuse("anchor '$'" + at(n.pos) + " is only supported at the end of the pattern");
      break;
    case node::kind::alt:
      for (const auto& c : n.children)
        check_positions(*c, at_start, at_end);
      break;
    case node::kind::concat: {
      // A child is at the start when only `^`s precede it, at the end when only `$`s follow.
      const auto& c = n.children;
      std::size_t first = 0, last = c.size();
      while (first < c.size() && c[first]->what == node::kind::start_anchor)
        ++first;
      while (last > 0 && c[last - 1]->what == node::kind::end_anchor)
        --last;
      for (std::size_t k = 0; k < c.size(); ++k)
        check_positions(*c[k], at_start && k <= first, at_end && k + 1 >= last);
      break;
    }
    case node::kind::repeat: {
      if (n.possessive && !(at_end && single_character(*n.children[0])))
        refuse("possessive quantifier" + at(n.pos) +
               " is only supported on one character at the end of the pattern (elsewhere it changes what "
               "matches); drop its '+'");
      // Inside a repetition, a second pass is neither at the start nor at the end.
      const bool once = n.max >= 0 && n.max <= 1;
      check_positions(*n.children[0], at_start && once, at_end && once);
      break;
    }
    default:
      break;
  }
}

bool nullable(const node& n) {
  switch (n.what) {
    case node::kind::chars:
      return false;
    case node::kind::concat:
      return std::all_of(n.children.begin(), n.children.end(), [](const auto& c) { return nullable(*c); });
    case node::kind::alt:
      return std::any_of(n.children.begin(), n.children.end(), [](const auto& c) { return nullable(*c); });
    case node::kind::repeat:
      return n.min == 0 || n.max == 0 || nullable(*n.children[0]);
    default:
      return true;
  }
}

// The same language without the empty string (nullptr: nothing left). Repeating an item
// that matches empty as a right-recursive rule would be left recursion, so x* with a
// nullable x is written (x minus empty)*, which matches the same strings. `budget` bounds
// the nodes a rewrite may make (a long run of optional items costs its length squared).
node_ptr non_empty(const node_ptr& n, std::size_t& budget) {
  switch (n->what) {
    case node::kind::chars:
      return n;
    case node::kind::alt: {
      std::vector<node_ptr> kept;
      for (const auto& c : n->children)
        if (auto k = non_empty(c, budget))
          kept.push_back(std::move(k));
      return kept.empty() ? nullptr : make_list(node::kind::alt, std::move(kept), n->pos);
    }
    case node::kind::concat: {
      // A non-empty match has a first non-empty part, c_k, with all before it empty:
      // the union over k of ne(c_k) c_k+1 ... c_n, while c_1 .. c_k-1 can be empty.
      std::vector<node_ptr> items;
      for (const auto& c : n->children)
        if (c->what != node::kind::empty && c->what != node::kind::start_anchor && c->what != node::kind::end_anchor)
          items.push_back(c);
      std::vector<node_ptr> options;
      for (std::size_t k = 0; k < items.size(); ++k) {
        if (auto head = non_empty(items[k], budget)) {
          const auto size = items.size() - k;
          if (size > budget)
            refuse("the pattern compiles to more than " + std::to_string(max_grammar_elements) +
                   " grammar elements (a long run of optional items inside a repetition" + at(n->pos) +
                   "); simplify it");
          budget -= size;
          std::vector<node_ptr> parts{std::move(head)};
          parts.insert(parts.end(), items.begin() + static_cast<std::ptrdiff_t>(k) + 1, items.end());
          options.push_back(make_list(node::kind::concat, std::move(parts), n->pos));
        }
        if (!nullable(*items[k]))
          break;
      }
      return options.empty() ? nullptr : make_list(node::kind::alt, std::move(options), n->pos);
    }
    case node::kind::repeat: {
      const auto& item = n->children[0];
      if (n->max == 0)
        return nullptr;
      auto ne = non_empty(item, budget);
      if (!ne)
        return nullptr;
      if (n->min > 0 && !nullable(*item))
        return n;
      node r = *n;
      r.min = 1;
      r.children = {std::move(ne)};
      return make(std::move(r));
    }
    default:
      return nullptr;
  }
}

// The JSON escape of a code point that a JSON string cannot hold as it is.
std::string json_escape(char32_t c) {
  switch (c) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\n':
      return "\\n";
    case '\t':
      return "\\t";
    case '\r':
      return "\\r";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    default: {
      static constexpr char hex[] = "0123456789abcdef";
      return std::string("\\u00") + hex[(c >> 4) & 0xF] + hex[c & 0xF];
    }
  }
}

bool needs_json_escape(char32_t c) {
  return c < 0x20 || c == '"' || c == '\\';
}

class emitter {
 public:
  emitter(grammar& g, std::string_view name, regex_text text) : g_(g), name_(name), text_(text) {}

  // Each node's rules are made once; a node shared by non_empty's rewrites reuses them.
  sequence emit(const node_ptr& n) {
    if (auto it = done_.find(n.get()); it != done_.end())
      return it->second;
    sequence out = build(n);
    done_.emplace(n.get(), out);
    keep_.push_back(n);
    return out;
  }

 private:
  // A class whose code points are written as a JSON string body: the ones that need no
  // escape as they are, the others as their escape sequences.
  sequence json_chars(const std::vector<code_point_range>& ranges) {
    std::vector<code_point_range> plain;
    std::vector<sequence> alternatives;
    // The code points that need an escape are all at or below '\\': walk those one by one.
    constexpr char32_t last_special = '\\';
    for (const auto& r : ranges) {
      char32_t c = r.lo;
      for (; c <= r.hi && c <= last_special; ++c) {
        if (needs_json_escape(c))
          alternatives.push_back(grammar::literal(json_escape(c)));
        else if (!plain.empty() && plain.back().hi + 1 == c)
          plain.back().hi = c;
        else
          plain.push_back({c, c});
      }
      if (c <= r.hi) {
        if (!plain.empty() && plain.back().hi + 1 == c)
          plain.back().hi = r.hi;
        else
          plain.push_back({c, r.hi});
      }
    }
    if (!plain.empty())
      alternatives.push_back(raw_chars(plain));
    if (alternatives.size() == 1)
      return alternatives.front();
    return {g_.choice(name_ + "_escaped", std::move(alternatives))};
  }

  sequence raw_chars(const std::vector<code_point_range>& r) {
    if (r.size() == 1 && r[0].lo == r[0].hi)
      return utf8_sequences(r[0].lo, r[0].lo).at(0);
    if (std::all_of(r.begin(), r.end(), [](const auto& x) { return x.hi < 0x80; })) {
      std::vector<byte_range> bytes;
      for (const auto& x : r)
        bytes.push_back({static_cast<std::uint8_t>(x.lo), static_cast<std::uint8_t>(x.hi)});
      return {element::any_of(std::move(bytes))};
    }
    return {g_.code_points(name_ + "_class", r, false)};
  }

  sequence build(const node_ptr& n) {
    switch (n->what) {
      case node::kind::chars: {
        return text_ == regex_text::json_string_body ? json_chars(n->ranges) : raw_chars(n->ranges);
      }
      case node::kind::concat: {
        sequence out;
        for (const auto& c : n->children) {
          auto s = emit(c);
          out.insert(out.end(), s.begin(), s.end());
        }
        return out;
      }
      case node::kind::alt: {
        std::vector<sequence> alternatives;
        for (const auto& c : n->children)
          alternatives.push_back(emit(c));
        return {g_.choice(name_ + "_alt", std::move(alternatives))};
      }
      case node::kind::repeat: {
        const auto& item = n->children[0];
        if (n->max == 0)
          return {};
        if (n->min == 1 && n->max == 1)
          return emit(item);
        if (n->max < 0 && item->what == node::kind::repeat && item->max < 0 && item->min <= 1) {
          // (x*){m,} is x* and (x+){m,} is x{m,}: one repetition instead of two nested. Nested
          // unbounded repetitions make the matcher's parse states grow with every byte (each
          // level may or may not have ended), so they are never emitted as such.
          node r = *n;
          r.min = n->min * item->min;
          r.children = item->children;
          return emit(make(std::move(r)));
        }
        if (nullable(*item)) {
          // x{m,n} with x nullable is (x minus empty){0,n}.
          auto ne = non_empty(item, budget_);
          if (!ne)
            return {};
          node r = *n;
          r.min = 0;
          r.children = {std::move(ne)};
          return emit(make(std::move(r)));
        }
        return {g_.repeat(name_ + "_repeat", emit(item), n->min, n->max)};
      }
      default:
        return {};
    }
  }

  grammar& g_;
  std::string name_;
  regex_text text_;
  std::size_t budget_ = max_grammar_elements;
  std::map<const node*, sequence> done_;
  std::vector<node_ptr> keep_; // keeps the memo's keys alive
};

} // namespace

int add_regex(grammar& g, std::string_view pattern, std::string_view name, regex_text text) {
  if (pattern.size() > max_regex_length)
    refuse("the pattern is " + std::to_string(pattern.size()) + " bytes long, more than the " +
           std::to_string(max_regex_length) + " supported");
  const auto tree = parser(pattern).parse();
  check_positions(*tree, true, true);
  emitter e(g, name, text);
  return g.add_rule(name, {e.emit(tree)});
}

grammar regex_grammar(std::string_view pattern) {
  grammar g;
  g.set_root(add_regex(g, pattern));
  g.validate();
  return g;
}

} // namespace troupe::runtime::structured
