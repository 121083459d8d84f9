// The GBNF front end (see gbnf_grammar.hpp): one recursive-descent pass that writes rules
// as it reads them, then the checks that need the whole text (undefined rules, root, left
// recursion).
#include "runtime/structured/gbnf_grammar.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/errors.hpp"

namespace troupe::runtime::structured {

namespace {

constexpr char32_t max_code_point = 0x10FFFF;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

class gbnf_parser {
 public:
  explicit gbnf_parser(std::string_view text) : t_(text) {}

  grammar parse() {
    skip_space(true);
    while (more()) {
      definition();
      skip_space(true);
    }
    // The first undefined rule in the text, not in name order.
    const rule_info* undefined = nullptr;
    std::string undefined_name;
    for (const auto& [name, r] : rules_)
      if (r.defined_at == npos && (!undefined || r.first_use < undefined->first_use)) {
        undefined = &r;
        undefined_name = name;
      }
    if (undefined)
      fail(undefined->first_use, "rule '" + undefined_name + "' is used but never defined");
    const auto root = rules_.find("root");
    if (root == rules_.end())
      throw invalid_argument_error("GBNF: the grammar defines no 'root' rule", "structured_output");
    g_.set_root(root->second.id);
    try {
      g_.validate();
    } catch (const invalid_argument_error& e) {
      // Helper rules are named after the user's rule with a '_' suffix, which GBNF names
      // cannot contain: say which rule of the text it is.
      const std::string text = e.what();
      const auto quote = text.find('\'');
      const auto end = quote == std::string::npos ? quote : text.find_first_of("_'", quote + 1);
      const auto it = end == std::string::npos ? rules_.end() : rules_.find(text.substr(quote + 1, end - quote - 1));
      if (it == rules_.end())
        throw invalid_argument_error("GBNF: " + text, "structured_output");
      if (text[end] == '\'')
        throw invalid_argument_error("GBNF: " + text + " (defined at " + where(it->second.defined_at) + ")",
                                     "structured_output");
      throw invalid_argument_error("GBNF: rule '" + it->first + "' defined at " + where(it->second.defined_at) +
                                       " is left-recursive through one of its groups or repetitions (it can "
                                       "come back to the same point without matching a character; repeating "
                                       "something that can match nothing does that too)",
                                   "structured_output");
    }
    return std::move(g_);
  }

 private:
  static constexpr std::size_t npos = std::string_view::npos;

  struct rule_info {
    int id = -1;
    std::size_t defined_at = npos;
    std::size_t first_use = npos;
  };

  bool more() const { return i_ < t_.size(); }
  char peek() const { return t_[i_]; }

  std::string where(std::size_t pos) const {
    const auto before = t_.substr(0, pos);
    const auto line = std::count(before.begin(), before.end(), '\n') + 1;
    const auto line_start = before.rfind('\n');
    const auto column = pos - (line_start == npos ? 0 : line_start + 1) + 1;
    return "line " + std::to_string(line) + ", column " + std::to_string(column);
  }

  [[noreturn]] void fail(std::size_t pos, const std::string& message) const {
    throw invalid_argument_error("GBNF " + where(pos) + ": " + message, "structured_output");
  }

  std::string shown(std::size_t pos) const {
    if (pos >= t_.size())
      return "the end of the grammar";
    if (t_[pos] == '\n')
      return "the end of the line";
    return "'" + std::string(1, t_[pos]) + "'";
  }

  // Blanks and comments; newlines too where a definition cannot end.
  void skip_space(bool newlines) {
    while (more()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || c == '\r' || (c == '\n' && newlines)) {
        ++i_;
      } else if (c == '#') {
        while (more() && peek() != '\n')
          ++i_;
      } else {
        break;
      }
    }
  }

  std::size_t name_end(std::size_t from) const {
    while (from < t_.size() && is_name_char(t_[from]))
      ++from;
    return from;
  }

  bool starts_definition(std::size_t pos) const {
    auto k = name_end(pos);
    if (k == pos)
      return false;
    while (k < t_.size() && (t_[k] == ' ' || t_[k] == '\t'))
      ++k;
    return t_.substr(k, 3) == "::=";
  }

  // At a newline outside parentheses: does the definition go on on the next line? Not when
  // the text ends, the next line defines a rule, or it starts with a name at column 1 (a
  // definition whose `::=` is missing, which definition() then reports).
  bool continues_definition() {
    const auto saved = i_;
    skip_space(true);
    const auto next = i_;
    i_ = saved;
    if (next >= t_.size() || starts_definition(next))
      return false;
    const bool at_line_start = next == 0 || t_[next - 1] == '\n';
    if (at_line_start && is_name_char(t_[next]))
      return false;
    i_ = next;
    return true;
  }

  rule_info& rule_named(const std::string& name) {
    auto [it, fresh] = rules_.try_emplace(name);
    if (fresh)
      it->second.id = g_.add_rule(name);
    return it->second;
  }

  void definition() {
    const auto start = i_;
    const auto end = name_end(i_);
    if (end == i_)
      fail(i_, "expected a rule name, found " + shown(i_));
    const std::string name(t_.substr(i_, end - i_));
    i_ = end;
    skip_space(false);
    if (t_.substr(i_, 3) != "::=")
      fail(i_, "expected '::=' after rule name '" + name + "', found " + shown(i_));
    i_ += 3;
    auto& r = rule_named(name);
    if (r.defined_at != npos)
      fail(start, "rule '" + name + "' is already defined at " + where(r.defined_at));
    r.defined_at = start;
    const int id = r.id;
    current_ = name;
    skip_space(true);
    for (auto& alternative : alternatives(0))
      g_.add_alternative(id, std::move(alternative));
    if (more() && peek() == ')')
      fail(i_, "unbalanced parenthesis: ')' has no matching '('");
  }

  std::vector<sequence> alternatives(int depth) {
    std::vector<sequence> out{items(depth)};
    while (more() && peek() == '|') {
      ++i_;
      skip_space(true);
      out.push_back(items(depth));
    }
    return out;
  }

  // One sequence, up to a `|`, a `)`, the end, or the end of the definition.
  sequence items(int depth) {
    sequence out;
    std::size_t last = npos; // where the last item's elements start in `out`
    for (;;) {
      skip_space(depth > 0);
      if (!more())
        return out;
      if (peek() == '\n' && !continues_definition())
        return out;
      const auto start = i_;
      const char c = peek();
      if (c == '|' || c == ')')
        return out;
      if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (last == npos)
          fail(start, "quantifier '" + std::string(1, c) + "' has nothing to repeat");
        sequence item(out.begin() + static_cast<std::ptrdiff_t>(last), out.end());
        out.resize(last);
        out.push_back(quantified(std::move(item)));
        continue;
      }
      last = out.size();
      if (c == '"') {
        literal(out);
      } else if (c == '[') {
        out.push_back(char_class());
      } else if (c == '.') {
        ++i_;
        out.push_back(g_.code_points(current_ + "_any", {{0, max_code_point}}, false));
      } else if (c == '(') {
        if (depth + 1 > max_gbnf_nesting)
          fail(start, "parentheses nested deeper than " + std::to_string(max_gbnf_nesting));
        ++i_;
        skip_space(true);
        auto inner = alternatives(depth + 1);
        if (!more())
          fail(start, "unbalanced parenthesis: '(' is never closed");
        ++i_; // ')'
        out.push_back(g_.choice(current_ + "_group", std::move(inner)));
      } else if (is_name_char(c)) {
        const auto end = name_end(i_);
        auto& r = rule_named(std::string(t_.substr(i_, end - i_)));
        if (r.first_use == npos)
          r.first_use = start;
        i_ = end;
        out.push_back(element::ref(r.id));
      } else {
        fail(start, "unexpected " + shown(start));
      }
    }
  }

  element quantified(sequence item) {
    const auto start = i_;
    const char c = t_[i_++];
    const auto name = current_ + "_repeat";
    if (c == '*')
      return g_.star(name, std::move(item));
    if (c == '+')
      return g_.plus(name, std::move(item));
    if (c == '?')
      return g_.optional(name, std::move(item));
    auto number = [&](int& out) {
      skip_space(false);
      const auto first = i_;
      long value = 0;
      while (more() && peek() >= '0' && peek() <= '9')
        value = std::min<long>(value * 10 + (t_[i_++] - '0'), long{max_repeat_bound} + 1);
      out = static_cast<int>(value);
      skip_space(false);
      return i_ > first;
    };
    int min = 0, max = 0;
    if (!number(min))
      fail(start, "repetition '{' needs a count: {m}, {m,} or {m,n}");
    max = min;
    if (more() && peek() == ',') {
      ++i_;
      if (!number(max))
        max = -1;
    }
    if (!more() || peek() != '}')
      fail(start, "repetition '{' is not closed by '}': write {m}, {m,} or {m,n}");
    ++i_;
    const auto text = std::string(t_.substr(start, i_ - start));
    if (min > max_repeat_bound || max > max_repeat_bound)
      fail(start, "repetition " + text + " has a bound above " + std::to_string(max_repeat_bound));
    if (max >= 0 && max < min)
      fail(start, "repetition " + text + " has its minimum above its maximum");
    return g_.repeat(name, std::move(item), min, max);
  }

  // One code point of the text's UTF-8 at i_.
  char32_t code_point() {
    const auto b = static_cast<unsigned char>(t_[i_]);
    const int n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i_ + static_cast<std::size_t>(n) > t_.size())
      fail(i_, "the grammar is not valid UTF-8");
    char32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(t_[i_ + static_cast<std::size_t>(k)]);
      if ((c >> 6) != 0x2)
        fail(i_, "the grammar is not valid UTF-8");
      cp = (cp << 6) | (c & 0x3F);
    }
    const char32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > max_code_point || (cp >= 0xD800 && cp <= 0xDFFF))
      fail(i_, "the grammar is not valid UTF-8");
    i_ += static_cast<std::size_t>(n);
    return cp;
  }

  // One character of a literal or class: an escape or a code point. `what` names the
  // enclosing construct for the unterminated message.
  char32_t character(std::size_t opened, const char* what) {
    if (!more() || peek() == '\n')
      fail(opened, std::string("unterminated ") + what);
    if (peek() != '\\')
      return code_point();
    const auto start = i_++;
    if (!more() || peek() == '\n')
      fail(opened, std::string("unterminated ") + what);
    const char c = t_[i_++];
    switch (c) {
      case 'n':
        return '\n';
      case 't':
        return '\t';
      case 'r':
        return '\r';
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
        return static_cast<char32_t>(c);
      case 'x':
      case 'u':
      case 'U': {
        const std::size_t digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        unsigned long value = 0;
        for (std::size_t k = 0; k < digits; ++k) {
          if (!more() || !is_hex(peek()))
            fail(start, "escape '\\" + std::string(1, c) + "' needs " + std::to_string(digits) + " hex digits");
          const char h = t_[i_++];
          value = value * 16 + static_cast<unsigned long>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        if (value > max_code_point || (value >= 0xD800 && value <= 0xDFFF))
          fail(start, "escape '" + std::string(t_.substr(start, i_ - start)) + "' is not a Unicode character");
        return static_cast<char32_t>(value);
      }
      default:
        fail(start, "unknown escape '\\" + std::string(1, c) + "'");
    }
  }

  void literal(sequence& out) {
    const auto opened = i_++;
    for (;;) {
      if (more() && peek() == '"') {
        ++i_;
        return;
      }
      const char32_t cp = character(opened, "string literal");
      auto bytes = utf8_sequences(cp, cp).at(0);
      out.insert(out.end(), bytes.begin(), bytes.end());
    }
  }

  element char_class() {
    const auto opened = i_++;
    bool negated = false;
    if (more() && peek() == '^') {
      negated = true;
      ++i_;
    }
    std::vector<code_point_range> ranges;
    while (!(more() && peek() == ']')) {
      const auto item_start = i_;
      const char32_t lo = character(opened, "character class");
      char32_t hi = lo;
      if (more() && peek() == '-' && i_ + 1 < t_.size() && t_[i_ + 1] != ']') {
        ++i_;
        hi = character(opened, "character class");
        if (hi < lo)
          fail(item_start, "range '" + std::string(t_.substr(item_start, i_ - item_start)) + "' is out of order");
      }
      ranges.push_back({lo, hi});
    }
    ++i_; // ']'
    if (!negated && std::all_of(ranges.begin(), ranges.end(), [](const auto& r) { return r.hi < 0x80; })) {
      if (ranges.empty())
        fail(opened, "character class '[]' matches no character");
      std::vector<byte_range> bytes;
      for (const auto& r : ranges)
        bytes.push_back({static_cast<std::uint8_t>(r.lo), static_cast<std::uint8_t>(r.hi)});
      return element::any_of(std::move(bytes));
    }
    try {
      return g_.code_points(current_ + "_class", std::move(ranges), negated);
    } catch (const invalid_argument_error& e) {
      if (std::string(e.what()).find("matches no character") == std::string::npos)
        throw;
      fail(opened, "character class '" + std::string(t_.substr(opened, i_ - opened)) + "' matches no character");
    }
  }

  std::string_view t_;
  std::size_t i_ = 0;
  grammar g_;
  std::map<std::string, rule_info> rules_;
  std::string current_; // the rule being defined, to name its helper rules
};

} // namespace

grammar gbnf_grammar(std::string_view text) {
  return gbnf_parser(text).parse();
}

} // namespace troupe::runtime::structured
