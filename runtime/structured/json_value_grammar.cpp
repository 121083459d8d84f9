// JSON's lexical pieces as grammar rules, and the compact text of enum and const values.
#include "runtime/structured/json_value_grammar.hpp"

#include <boost/json.hpp>

#include <charconv>
#include <cmath>

#include "runtime/errors.hpp"
#include "runtime/structured/json_schema_grammar.hpp"

namespace troupe::runtime::structured {

namespace json = boost::json;

element digit() {
  return element::any_of({{'0', '9'}});
}

element hex_digit() {
  return element::any_of({{'0', '9'}, {'a', 'f'}, {'A', 'F'}});
}

std::string number_text(const json::value& v) {
  if (v.is_int64())
    return std::to_string(v.get_int64());
  if (v.is_uint64())
    return std::to_string(v.get_uint64());
  const double d = v.get_double() == 0 ? 0.0 : v.get_double(); // -0 is written 0
  char buf[400];
  const auto fmt = std::trunc(d) == d ? std::chars_format::fixed : std::chars_format::general;
  const auto r = std::to_chars(buf, buf + sizeof buf, d, fmt);
  return std::string(buf, r.ptr);
}

std::string canonical_text(const json::value& v) {
  switch (v.kind()) {
    case json::kind::object: {
      std::string out = "{";
      bool first = true;
      for (const auto& kv : v.get_object()) {
        if (!first)
          out += ',';
        first = false;
        out += json::serialize(json::string(kv.key())) + ":" + canonical_text(kv.value());
      }
      return out + "}";
    }
    case json::kind::array: {
      std::string out = "[";
      for (std::size_t i = 0; i < v.get_array().size(); ++i)
        out += (i ? "," : "") + canonical_text(v.get_array()[i]);
      return out + "]";
    }
    case json::kind::int64:
    case json::kind::uint64:
    case json::kind::double_:
      // No param here: the schema compiler names the request field on every error it passes on.
      if (v.is_double() && !std::isfinite(v.get_double()))
        throw invalid_argument_error("a non-finite number has no JSON text");
      return number_text(v);
    default:
      return json::serialize(v); // strings, booleans, null
  }
}

bool is_integral_number(const json::value& v) {
  return v.is_int64() || v.is_uint64() ||
         (v.is_double() && std::isfinite(v.get_double()) && std::trunc(v.get_double()) == v.get_double());
}

element json_value_rules::ws() {
  if (!ws_)
    ws_ = g_.repeat("ws", {element::any_of({{' ', ' '}, {'\n', '\n'}})}, 0, max_json_whitespace);
  return *ws_;
}

// One character of a string's content: a code point other than '"', '\' and controls,
// or an escape. \u escapes name a code point: a non-surrogate, or a surrogate pair
// (lone surrogates are no text, and parsers refuse them).
element json_value_rules::string_char() {
  if (string_char_)
    return *string_char_;
  const auto hex = hex_digit;
  std::vector<sequence> alts;
  const element plain = g_.code_points("string_plain", {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}}, false);
  alts.push_back({plain});
  alts.push_back(
      {element::byte('\\'),
       element::any_of(
           {{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'}, {'f', 'f'}, {'n', 'n'}, {'r', 'r'}, {'t', 't'}})});
  alts.push_back({element::byte('\\'), element::byte('u'),
                  element::any_of({{'0', '9'}, {'a', 'c'}, {'A', 'C'}, {'e', 'f'}, {'E', 'F'}}), hex(), hex(), hex()});
  alts.push_back({element::byte('\\'), element::byte('u'), element::any_of({{'d', 'd'}, {'D', 'D'}}),
                  element::any_of({{'0', '7'}}), hex(), hex()});
  alts.push_back({element::byte('\\'), element::byte('u'), element::any_of({{'d', 'd'}, {'D', 'D'}}),
                  element::any_of({{'8', '9'}, {'a', 'b'}, {'A', 'B'}}), hex(), hex(), element::byte('\\'),
                  element::byte('u'), element::any_of({{'d', 'd'}, {'D', 'D'}}),
                  element::any_of({{'c', 'f'}, {'C', 'F'}}), hex(), hex()});
  string_char_ = g_.choice("string_char", std::move(alts));
  return *string_char_;
}

element json_value_rules::any_string() {
  if (!any_string_) {
    const element body = g_.star("string_chars", {string_char()});
    any_string_ = element::ref(g_.add_rule("string", {{element::byte('"'), body, element::byte('"')}}));
  }
  return *any_string_;
}

// -?(0|[1-9][0-9]*): JSON's integer part.
sequence json_value_rules::integer_text() {
  if (!digits_)
    digits_ = g_.star("digits", {digit()});
  const element magnitude =
      g_.choice("int_magnitude", {grammar::literal("0"), {element::any_of({{'1', '9'}}), *digits_}});
  return {g_.optional("minus", grammar::literal("-")), magnitude};
}

element json_value_rules::any_integer() {
  if (!any_integer_)
    any_integer_ = element::ref(g_.add_rule("integer", {integer_text()}));
  return *any_integer_;
}

// JSON's number, but with at most three exponent digits: doubles end near 1e308, and
// parsers refuse longer exponents (Boost.JSON: "exponent overflow").
element json_value_rules::any_number() {
  if (!any_number_) {
    const element fraction = g_.optional("fraction", {element::byte('.'), g_.plus("fraction_digits", {digit()})});
    const element exponent =
        g_.optional("exponent", {element::any_of({{'e', 'e'}, {'E', 'E'}}),
                                 g_.optional("exponent_sign", {element::any_of({{'+', '+'}, {'-', '-'}})}),
                                 g_.repeat("exponent_digits", {digit()}, 1, 3)});
    sequence s = integer_text();
    s.push_back(fraction);
    s.push_back(exponent);
    any_number_ = element::ref(g_.add_rule("number", {std::move(s)}));
  }
  return *any_number_;
}

// Any JSON value; objects and arrays nest through the rule itself.
element json_value_rules::any_value() {
  if (any_value_)
    return *any_value_;
  const int value = g_.add_rule("value");
  any_value_ = element::ref(value);
  const element object = any_object(), array = any_array();
  g_.add_alternative(value, {object});
  g_.add_alternative(value, {array});
  g_.add_alternative(value, {any_string()});
  g_.add_alternative(value, {any_number()});
  g_.add_alternative(value, grammar::literal("true"));
  g_.add_alternative(value, grammar::literal("false"));
  g_.add_alternative(value, grammar::literal("null"));
  return *any_value_;
}

element json_value_rules::any_object() {
  if (!any_object_) {
    const int object = g_.add_rule("object");
    any_object_ = element::ref(object);
    object_of(object, any_value(), "object");
  }
  return *any_object_;
}

void json_value_rules::object_of(int rule_id, element value, const std::string& name) {
  const sequence member{any_string(), ws(), element::byte(':'), ws(), value};
  sequence more{ws(), element::byte(','), ws()};
  append(more, member);
  g_.add_alternative(rule_id, {element::byte('{'), ws(), element::byte('}')});
  sequence full{element::byte('{'), ws()};
  append(full, member);
  full.push_back(g_.star(name + "_members", more));
  full.push_back(ws());
  full.push_back(element::byte('}'));
  g_.add_alternative(rule_id, std::move(full));
}

element json_value_rules::any_array() {
  if (!any_array_) {
    const int array = g_.add_rule("array");
    any_array_ = element::ref(array);
    const element value = any_value();
    g_.add_alternative(array, {element::byte('['), ws(), element::byte(']')});
    g_.add_alternative(
        array, {element::byte('['), ws(), value, g_.star("array_items", {ws(), element::byte(','), ws(), value}), ws(),
                element::byte(']')});
  }
  return *any_array_;
}

} // namespace troupe::runtime::structured
