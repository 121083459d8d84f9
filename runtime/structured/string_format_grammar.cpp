// JSON Schema's string formats with a cheap grammar, as quoted JSON strings.
#include "runtime/structured/string_format_grammar.hpp"

#include <cstdint>

#include "runtime/structured/json_value_grammar.hpp"

namespace troupe::runtime::structured {

std::optional<element> string_format(grammar& g, const std::string& format) {
  auto d = [] { return digit(); };
  auto r = [](char lo, char hi) {
    return element::any_of({{static_cast<std::uint8_t>(lo), static_cast<std::uint8_t>(hi)}});
  };
  auto b = [](char c) { return element::byte(static_cast<std::uint8_t>(c)); };
  auto quoted = [&](const std::string& name, sequence body) {
    sequence s{b('"')};
    append(s, body);
    s.push_back(b('"'));
    return g.choice("format_" + name, {std::move(s)});
  };
  // Days by month; February has 29 in every year (leap years would need the year's digits).
  auto date = [&] {
    const element day31 = g.choice("day31", {{b('0'), r('1', '9')}, {r('1', '2'), d()}, {b('3'), r('0', '1')}});
    const element day30 = g.choice("day30", {{b('0'), r('1', '9')}, {r('1', '2'), d()}, {b('3'), b('0')}});
    const element day29 = g.choice("day29", {{b('0'), r('1', '9')}, {r('1', '2'), d()}});
    const element month_day = g.choice(
        "month_day", {{b('0'), element::any_of({{'1', '1'}, {'3', '3'}, {'5', '5'}, {'7', '8'}}), b('-'), day31},
                      {b('1'), element::any_of({{'0', '0'}, {'2', '2'}}), b('-'), day31},
                      {b('0'), element::any_of({{'4', '4'}, {'6', '6'}, {'9', '9'}}), b('-'), day30},
                      {b('1'), b('1'), b('-'), day30},
                      {b('0'), b('2'), b('-'), day29}});
    return sequence{d(), d(), d(), d(), b('-'), month_day};
  };
  auto time = [&] {
    const element hour = g.choice("hour", {{r('0', '1'), d()}, {b('2'), r('0', '3')}});
    const element fraction = g.optional("second_fraction", {b('.'), g.repeat("fraction_digits", {d()}, 1, 6)});
    const element offset =
        g.choice("offset", {{b('Z')}, {element::any_of({{'+', '+'}, {'-', '-'}}), hour, b(':'), r('0', '5'), d()}});
    return sequence{hour, b(':'), r('0', '5'), d(), b(':'), r('0', '5'), d(), fraction, offset};
  };
  std::optional<element> out;
  if (format == "date") {
    out = quoted(format, date());
  } else if (format == "time") {
    out = quoted(format, time());
  } else if (format == "date-time") {
    sequence s = date();
    s.push_back(b('T'));
    append(s, time());
    out = quoted(format, std::move(s));
  } else if (format == "uuid") {
    sequence s;
    for (const int n : {8, 4, 4, 4, 12}) {
      if (!s.empty())
        s.push_back(b('-'));
      for (int i = 0; i < n; ++i)
        s.push_back(hex_digit());
    }
    out = quoted(format, std::move(s));
  } else if (format == "ipv4") {
    const element octet = g.choice(
        "octet",
        {{d()}, {r('1', '9'), d()}, {b('1'), d(), d()}, {b('2'), r('0', '4'), d()}, {b('2'), b('5'), r('0', '5')}});
    out = quoted(format, {octet, b('.'), octet, b('.'), octet, b('.'), octet});
  } else if (format == "email") {
    // Dot-separated atoms @ dot-separated labels, at least two: the common addresses,
    // without RFC 5322's quoted local parts and address literals.
    const element atom_char =
        element::any_of({{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'_', '_'}, {'%', '%'}, {'+', '+'}, {'-', '-'}});
    const element atom = g.plus("email_atom", {atom_char});
    const element local = g.choice("email_local", {{atom, g.star("email_atoms", {b('.'), atom})}});
    const element alnum = element::any_of({{'a', 'z'}, {'A', 'Z'}, {'0', '9'}});
    // A label starts and ends with a letter or digit, hyphens only inside.
    const element label_run = g.plus("email_label_run", {alnum});
    const element label =
        g.choice("email_label", {{label_run, g.star("email_label_rest", {g.plus("hyphens", {b('-')}), label_run})}});
    out = quoted(format, {local, b('@'), label, g.plus("email_domain", {b('.'), label})});
  }
  return out;
}

} // namespace troupe::runtime::structured
