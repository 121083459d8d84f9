// The JSON Schema compiler: one walk over the schema that writes grammar rules, shared rules
// for the pieces every schema reuses (whitespace, strings, numbers, any value).
#include "runtime/structured/json_schema_grammar.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "runtime/errors.hpp"

namespace troupe::runtime::structured {

namespace json = boost::json;

namespace {

constexpr const char* param = "response_format";

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw invalid_argument_error(path + ": " + what, param);
}

// RFC 6901: '~' and '/' inside a token are escaped so that the path reads back.
std::string child(const std::string& path, std::string_view token) {
  std::string out = path + "/";
  for (const char c : token)
    out += c == '~' ? std::string("~0") : c == '/' ? std::string("~1") : std::string(1, c);
  return out;
}

std::string child(const std::string& path, std::size_t index) {
  return path + "/" + std::to_string(index);
}

// A number as a model is expected to write it: integers in decimal, integral doubles
// without an exponent (-0 as 0), other doubles in their shortest round-trip form.
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

// The compact serialization enum and const values are emitted as.
std::string canonical(const json::value& v) {
  switch (v.kind()) {
    case json::kind::object: {
      std::string out = "{";
      bool first = true;
      for (const auto& kv : v.get_object()) {
        if (!first)
          out += ',';
        first = false;
        out += json::serialize(json::string(kv.key())) + ":" + canonical(kv.value());
      }
      return out + "}";
    }
    case json::kind::array: {
      std::string out = "[";
      for (std::size_t i = 0; i < v.get_array().size(); ++i)
        out += (i ? "," : "") + canonical(v.get_array()[i]);
      return out + "]";
    }
    case json::kind::int64:
    case json::kind::uint64:
    case json::kind::double_:
      if (v.is_double() && !std::isfinite(v.get_double()))
        throw invalid_argument_error("a non-finite number has no JSON text", param);
      return number_text(v);
    default:
      return json::serialize(v); // strings, booleans, null
  }
}

bool is_integral_number(const json::value& v) {
  return v.is_int64() || v.is_uint64() ||
         (v.is_double() && std::isfinite(v.get_double()) && std::trunc(v.get_double()) == v.get_double());
}

// Which JSON type a value is, in the schema's words ("integer" for integral numbers).
bool has_type(const json::value& v, std::string_view type) {
  if (type == "null")
    return v.is_null();
  if (type == "boolean")
    return v.is_bool();
  if (type == "string")
    return v.is_string();
  if (type == "object")
    return v.is_object();
  if (type == "array")
    return v.is_array();
  if (type == "number")
    return v.is_number();
  if (type == "integer")
    return is_integral_number(v);
  return false;
}

// Keywords that do not change which values are valid (OpenAPI's discriminator only names
// the property whose const already tells the branches apart).
const std::set<std::string, std::less<>> annotations = {
    "description", "title",         "default",         "examples",         "$schema",   "$id",
    "$comment",    "strict",        "deprecated",      "readOnly",         "writeOnly", "$defs",
    "definitions", "discriminator", "contentEncoding", "contentMediaType",
};
const std::set<std::string, std::less<>> supported = {
    "type",
    "enum",
    "const",
    "anyOf",
    "oneOf",
    "allOf",
    "$ref",
    "nullable",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minLength",
    "maxLength",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
};
// Keywords that make a schema's type plain when "type" is absent.
const std::map<std::string, std::string, std::less<>> implied_type = {
    {"properties", "object"}, {"required", "object"},         {"additionalProperties", "object"},
    {"items", "array"},       {"prefixItems", "array"},       {"minItems", "array"},
    {"maxItems", "array"},    {"uniqueItems", "array"},       {"minLength", "string"},
    {"maxLength", "string"},  {"format", "string"},           {"minimum", "number"},
    {"maximum", "number"},    {"exclusiveMinimum", "number"}, {"exclusiveMaximum", "number"},
};
const std::vector<std::string> all_types = {"null", "boolean", "object", "array", "number", "string", "integer"};

element digit() {
  return element::any_of({{'0', '9'}});
}

class schema_compiler {
 public:
  explicit schema_compiler(const json::value& root) : root_(root) {}

  grammar compile_root() {
    const element top = compile(root_, "#");
    g_.set_root(g_.add_rule("root", {{top}}));
    return finish();
  }

  grammar compile_any_object() {
    g_.set_root(g_.add_rule("root", {{any_object()}}));
    return finish();
  }

 private:
  grammar finish() {
    refuse_unproductive();
    g_.validate();
    return std::move(g_);
  }

  // A rule that derives no finite string (a required recursion, "a node must contain a
  // node") would let the matcher enter a branch it can never leave.
  void refuse_unproductive() {
    const auto& rules = g_.rules();
    std::vector<bool> productive(rules.size(), false);
    for (bool changed = true; changed;) {
      changed = false;
      for (std::size_t i = 0; i < rules.size(); ++i) {
        if (productive[i])
          continue;
        for (const auto& alt : rules[i].alternatives)
          if (std::all_of(alt.begin(), alt.end(), [&](const element& e) {
                return e.what == element::kind::bytes || productive[static_cast<std::size_t>(e.rule)];
              })) {
            productive[i] = changed = true;
            break;
          }
      }
    }
    for (std::size_t i = 0; i < rules.size(); ++i)
      if (!productive[i])
        fail(rules[i].name, "no finite JSON value satisfies this schema (it requires itself without end)");
  }

  // --- shared pieces -------------------------------------------------------------------
  element ws() {
    if (!ws_)
      ws_ = g_.repeat("ws", {element::any_of({{' ', ' '}, {'\n', '\n'}})}, 0, max_json_whitespace);
    return *ws_;
  }

  sequence lit(std::string_view text) { return grammar::literal(text); }

  static void append(sequence& s, const sequence& more) { s.insert(s.end(), more.begin(), more.end()); }

  element hex() { return element::any_of({{'0', '9'}, {'a', 'f'}, {'A', 'F'}}); }

  // One character of a string's content: a code point other than '"', '\' and controls,
  // or an escape. \u escapes name a code point: a non-surrogate, or a surrogate pair
  // (lone surrogates are no text, and parsers refuse them).
  element string_char() {
    if (string_char_)
      return *string_char_;
    std::vector<sequence> alts;
    const element plain = g_.code_points("string_plain", {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}}, false);
    alts.push_back({plain});
    alts.push_back(
        {element::byte('\\'),
         element::any_of(
             {{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'}, {'f', 'f'}, {'n', 'n'}, {'r', 'r'}, {'t', 't'}})});
    alts.push_back({element::byte('\\'), element::byte('u'),
                    element::any_of({{'0', '9'}, {'a', 'c'}, {'A', 'C'}, {'e', 'f'}, {'E', 'F'}}), hex(), hex(),
                    hex()});
    alts.push_back({element::byte('\\'), element::byte('u'), element::any_of({{'d', 'd'}, {'D', 'D'}}),
                    element::any_of({{'0', '7'}}), hex(), hex()});
    alts.push_back({element::byte('\\'), element::byte('u'), element::any_of({{'d', 'd'}, {'D', 'D'}}),
                    element::any_of({{'8', '9'}, {'a', 'b'}, {'A', 'B'}}), hex(), hex(), element::byte('\\'),
                    element::byte('u'), element::any_of({{'d', 'd'}, {'D', 'D'}}),
                    element::any_of({{'c', 'f'}, {'C', 'F'}}), hex(), hex()});
    string_char_ = g_.choice("string_char", std::move(alts));
    return *string_char_;
  }

  element any_string() {
    if (!any_string_) {
      const element body = g_.star("string_chars", {string_char()});
      any_string_ = element::ref(g_.add_rule("string", {{element::byte('"'), body, element::byte('"')}}));
    }
    return *any_string_;
  }

  // -?(0|[1-9][0-9]*): JSON's integer part.
  sequence integer_text() {
    if (!digits_)
      digits_ = g_.star("digits", {digit()});
    const element magnitude = g_.choice("int_magnitude", {lit("0"), {element::any_of({{'1', '9'}}), *digits_}});
    return {g_.optional("minus", lit("-")), magnitude};
  }

  element any_integer() {
    if (!any_integer_)
      any_integer_ = element::ref(g_.add_rule("integer", {integer_text()}));
    return *any_integer_;
  }

  // JSON's number, but with at most three exponent digits: doubles end near 1e308, and
  // parsers refuse longer exponents (Boost.JSON: "exponent overflow").
  element any_number() {
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
  element any_value() {
    if (any_value_)
      return *any_value_;
    const int value = g_.add_rule("value");
    any_value_ = element::ref(value);
    const element object = any_object(), array = any_array();
    g_.add_alternative(value, {object});
    g_.add_alternative(value, {array});
    g_.add_alternative(value, {any_string()});
    g_.add_alternative(value, {any_number()});
    g_.add_alternative(value, lit("true"));
    g_.add_alternative(value, lit("false"));
    g_.add_alternative(value, lit("null"));
    return *any_value_;
  }

  element any_object() {
    if (!any_object_) {
      const int object = g_.add_rule("object");
      any_object_ = element::ref(object);
      object_of(object, any_value(), "object");
    }
    return *any_object_;
  }

  // { } or { "k": v (, "k": v)* } into `rule_id`, values from `value`.
  void object_of(int rule_id, element value, const std::string& name) {
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

  element any_array() {
    if (!any_array_) {
      const int array = g_.add_rule("array");
      any_array_ = element::ref(array);
      const element value = any_value();
      g_.add_alternative(array, {element::byte('['), ws(), element::byte(']')});
      g_.add_alternative(
          array, {element::byte('['), ws(), value, g_.star("array_items", {ws(), element::byte(','), ws(), value}),
                  ws(), element::byte(']')});
    }
    return *any_array_;
  }

  // --- schemas -----------------------------------------------------------------------
  element compile(const json::value& s, const std::string& path) {
    if (s.is_bool()) {
      if (!s.get_bool())
        fail(path, "the schema 'false' accepts no value");
      return any_value();
    }
    if (!s.is_object())
      fail(path, "a schema must be a JSON object or a boolean, got " + std::string(json::to_string(s.kind())));
    const auto& o = s.get_object();
    std::vector<std::string> constraining;
    for (const auto& kv : o) {
      const std::string_view k = kv.key();
      if (annotations.count(k))
        continue;
      if (k == "pattern")
        fail(child(path, k), "'pattern' is not supported (constrain the value with 'enum' or 'format' instead)");
      if (!supported.count(k))
        fail(child(path, k), "'" + std::string(k) + "' is not supported");
      constraining.emplace_back(k);
    }
    auto only = [&](std::string_view keyword, const std::set<std::string, std::less<>>& allowed) {
      for (const auto& k : constraining)
        if (k != keyword && !allowed.count(k))
          fail(child(path, k), "'" + k + "' alongside '" + std::string(keyword) + "' is not supported");
    };
    if (o.contains("$ref")) {
      only("$ref", {});
      return compile_ref(o.at("$ref"), child(path, "$ref"));
    }
    for (const char* combinator : {"anyOf", "oneOf", "allOf"})
      if (o.contains(combinator)) {
        only(combinator, {});
        return compile_combinator(combinator, o.at(combinator), child(path, combinator));
      }
    if (o.contains("enum") || o.contains("const")) {
      only(o.contains("enum") ? "enum" : "const", {"enum", "const", "type", "nullable"});
      return compile_values(o, path);
    }
    std::vector<std::string> types = types_of(o, path);
    std::vector<sequence> alts;
    for (const auto& t : types)
      alts.push_back({compile_type(t, o, path)});
    if (alts.size() == 1)
      return alts[0][0];
    return g_.choice(path, std::move(alts));
  }

  std::vector<std::string> types_of(const json::object& o, const std::string& path) {
    std::vector<std::string> types;
    if (const auto* t = o.if_contains("type")) {
      const std::string tp = child(path, "type");
      auto add = [&](const json::value& name, const std::string& p) {
        if (!name.is_string())
          fail(p, "a type must be a string");
        const std::string n(name.get_string());
        if (std::find(all_types.begin(), all_types.end(), n) == all_types.end())
          fail(p, "unknown type '" + n + "'");
        if (std::find(types.begin(), types.end(), n) != types.end())
          fail(p, "type '" + n + "' is listed twice");
        types.push_back(n);
      };
      if (t->is_array()) {
        if (t->get_array().empty())
          fail(tp, "an empty list of types accepts no value");
        for (std::size_t i = 0; i < t->get_array().size(); ++i)
          add(t->get_array()[i], child(tp, i));
      } else {
        add(*t, tp);
      }
    } else {
      std::set<std::string> implied;
      for (const auto& kv : o)
        if (auto it = implied_type.find(kv.key()); it != implied_type.end())
          implied.insert(it->second);
      if (implied.size() > 1)
        fail(path, "keywords of several types without 'type'; add 'type'");
      // A keyword of one type says which type is meant (a subset of what the schema allows:
      // JSON Schema would let values of the other types through untouched).
      if (implied.empty())
        types = all_types;
      else
        types.push_back(*implied.begin());
    }
    if (const auto* n = o.if_contains("nullable")) {
      if (!n->is_bool())
        fail(child(path, "nullable"), "'nullable' must be a boolean");
      if (n->get_bool() && std::find(types.begin(), types.end(), "null") == types.end())
        types.push_back("null");
    }
    // "number" already derives every integer.
    if (!o.contains("type") && std::find(types.begin(), types.end(), "number") != types.end())
      std::erase(types, "integer");
    return types;
  }

  element compile_type(const std::string& type, const json::object& o, const std::string& path) {
    if (type == "null")
      return g_.choice("null", {lit("null")});
    if (type == "boolean")
      return g_.choice("boolean", {lit("true"), lit("false")});
    if (type == "string")
      return compile_string(o, path);
    if (type == "integer")
      return compile_integer(o, path);
    if (type == "number")
      return compile_number(o, path);
    if (type == "object")
      return compile_object(o, path);
    return compile_array(o, path);
  }

  element compile_ref(const json::value& ref, const std::string& path) {
    if (!ref.is_string())
      fail(path, "'$ref' must be a string");
    const std::string target(ref.get_string());
    if (auto it = refs_.find(target); it != refs_.end())
      return element::ref(it->second);
    if (target.empty() || target[0] != '#')
      fail(path, "'$ref' '" + target + "' is not supported: only references inside the schema ('#/$defs/...') are");
    const json::value* at = &root_;
    std::size_t pos = 1;
    if (target.size() > 1 && target[1] != '/')
      fail(path, "'$ref' '" + target + "' is not supported: only JSON pointers ('#/$defs/...') are");
    while (pos < target.size()) {
      const std::size_t next = std::min(target.find('/', pos + 1), target.size());
      std::string token;
      for (std::size_t i = pos + 1; i < next; ++i) {
        if (target[i] == '~' && i + 1 < next && (target[i + 1] == '0' || target[i + 1] == '1')) {
          token += target[++i] == '0' ? '~' : '/';
        } else {
          token += target[i];
        }
      }
      pos = next;
      const json::value* found = nullptr;
      if (at->is_object()) {
        found = at->get_object().if_contains(token);
      } else if (at->is_array() && !token.empty() &&
                 std::all_of(token.begin(), token.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        const std::size_t i = std::stoul(token);
        if (i < at->get_array().size())
          found = &at->get_array()[i];
      }
      if (!found)
        fail(path, "'$ref' '" + target + "' does not resolve inside the schema");
      at = found;
    }
    // The rule exists before its schema is compiled, so that a recursive reference finds it.
    const int id = g_.add_rule(target);
    refs_.emplace(target, id);
    const element body = compile(*at, target);
    g_.add_alternative(id, {body});
    return element::ref(id);
  }

  element compile_combinator(std::string_view name, const json::value& list, const std::string& path) {
    if (!list.is_array() || list.get_array().empty())
      fail(path, "'" + std::string(name) + "' must be a non-empty array of schemas");
    const auto& a = list.get_array();
    if (name == "allOf" && a.size() > 1)
      fail(path, "'allOf' with more than one subschema is not supported");
    std::vector<sequence> alts;
    for (std::size_t i = 0; i < a.size(); ++i)
      alts.push_back({compile(a[i], child(path, i))});
    if (alts.size() == 1)
      return alts[0][0];
    return g_.choice(path, std::move(alts));
  }

  element compile_values(const json::object& o, const std::string& path) {
    std::vector<const json::value*> values;
    if (const auto* e = o.if_contains("enum")) {
      if (!e->is_array() || e->get_array().empty())
        fail(child(path, "enum"), "'enum' must be a non-empty array");
      for (const auto& v : e->get_array())
        values.push_back(&v);
    }
    if (const auto* c = o.if_contains("const")) {
      if (values.empty()) {
        values.push_back(c);
      } else {
        // enum and const together: the values that are both.
        const std::string wanted = canonical(*c);
        std::erase_if(values, [&](const json::value* v) { return canonical(*v) != wanted; });
      }
    }
    if (o.contains("type") || o.contains("nullable")) {
      const std::vector<std::string> types = types_of(o, path);
      std::erase_if(values, [&](const json::value* v) {
        return std::none_of(types.begin(), types.end(), [&](const std::string& t) { return has_type(*v, t); });
      });
    }
    if (values.empty())
      fail(path, "no value of 'enum' / 'const' satisfies the schema's other keywords");
    std::vector<sequence> alts;
    std::set<std::string> seen;
    for (const auto* v : values) {
      std::string text = canonical(*v);
      if (seen.insert(text).second)
        alts.push_back(lit(text));
    }
    return g_.choice(path + "/enum", std::move(alts));
  }

  // A non-negative integer keyword, at most max_repeat_bound.
  std::optional<int> count_keyword(const json::object& o, std::string_view key, const std::string& path) {
    const auto* v = o.if_contains(key);
    if (!v)
      return std::nullopt;
    const std::string p = child(path, key);
    if (!is_integral_number(*v) || v->to_number<double>() < 0)
      fail(p, "'" + std::string(key) + "' must be a non-negative integer");
    const double n = v->to_number<double>();
    if (n > max_repeat_bound)
      fail(p, "'" + std::string(key) + "' " + number_text(*v) + " is above the supported " +
                  std::to_string(max_repeat_bound));
    return static_cast<int>(n);
  }

  element compile_string(const json::object& o, const std::string& path) {
    const auto min = count_keyword(o, "minLength", path);
    const auto max = count_keyword(o, "maxLength", path);
    if (min && max && *min > *max)
      fail(child(path, "minLength"), "'minLength' is above 'maxLength': no string satisfies both");
    if (const auto* f = o.if_contains("format")) {
      if (!f->is_string())
        fail(child(path, "format"), "'format' must be a string");
      const std::string format(f->get_string());
      if (auto e = compile_format(format)) {
        if (min || max)
          fail(child(path, min ? "minLength" : "maxLength"),
               "'" + std::string(min ? "minLength" : "maxLength") + "' alongside 'format' is not supported");
        return *e;
      }
    }
    if (!min && !max)
      return any_string();
    const element body = g_.repeat(path + "/chars", {string_char()}, min.value_or(0), max ? *max : -1);
    return g_.choice(path, {{element::byte('"'), body, element::byte('"')}});
  }

  // Formats with a cheap grammar; nullopt for the rest, which are annotations.
  std::optional<element> compile_format(const std::string& format) {
    if (auto it = formats_.find(format); it != formats_.end())
      return it->second;
    auto d = [] { return digit(); };
    auto r = [](char lo, char hi) {
      return element::any_of({{static_cast<std::uint8_t>(lo), static_cast<std::uint8_t>(hi)}});
    };
    auto b = [](char c) { return element::byte(static_cast<std::uint8_t>(c)); };
    auto quoted = [&](const std::string& name, sequence body) {
      sequence s{b('"')};
      append(s, body);
      s.push_back(b('"'));
      return g_.choice("format_" + name, {std::move(s)});
    };
    // Days by month; February has 29 in every year (leap years would need the year's digits).
    auto date = [&] {
      const element day31 = g_.choice("day31", {{b('0'), r('1', '9')}, {r('1', '2'), d()}, {b('3'), r('0', '1')}});
      const element day30 = g_.choice("day30", {{b('0'), r('1', '9')}, {r('1', '2'), d()}, {b('3'), b('0')}});
      const element day29 = g_.choice("day29", {{b('0'), r('1', '9')}, {r('1', '2'), d()}});
      const element month_day = g_.choice(
          "month_day", {{b('0'), element::any_of({{'1', '1'}, {'3', '3'}, {'5', '5'}, {'7', '8'}}), b('-'), day31},
                        {b('1'), element::any_of({{'0', '0'}, {'2', '2'}}), b('-'), day31},
                        {b('0'), element::any_of({{'4', '4'}, {'6', '6'}, {'9', '9'}}), b('-'), day30},
                        {b('1'), b('1'), b('-'), day30},
                        {b('0'), b('2'), b('-'), day29}});
      return sequence{d(), d(), d(), d(), b('-'), month_day};
    };
    auto time = [&] {
      const element hour = g_.choice("hour", {{r('0', '1'), d()}, {b('2'), r('0', '3')}});
      const element fraction = g_.optional("second_fraction", {b('.'), g_.repeat("fraction_digits", {d()}, 1, 6)});
      const element offset =
          g_.choice("offset", {{b('Z')}, {element::any_of({{'+', '+'}, {'-', '-'}}), hour, b(':'), r('0', '5'), d()}});
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
          s.push_back(hex());
      }
      out = quoted(format, std::move(s));
    } else if (format == "ipv4") {
      const element octet = g_.choice(
          "octet",
          {{d()}, {r('1', '9'), d()}, {b('1'), d(), d()}, {b('2'), r('0', '4'), d()}, {b('2'), b('5'), r('0', '5')}});
      out = quoted(format, {octet, b('.'), octet, b('.'), octet, b('.'), octet});
    } else if (format == "email") {
      // Dot-separated atoms @ dot-separated labels, at least two: the common addresses,
      // without RFC 5322's quoted local parts and address literals.
      const element atom_char =
          element::any_of({{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'_', '_'}, {'%', '%'}, {'+', '+'}, {'-', '-'}});
      const element atom = g_.plus("email_atom", {atom_char});
      const element local = g_.choice("email_local", {{atom, g_.star("email_atoms", {b('.'), atom})}});
      const element alnum = element::any_of({{'a', 'z'}, {'A', 'Z'}, {'0', '9'}});
      // A label starts and ends with a letter or digit, hyphens only inside.
      const element label_run = g_.plus("email_label_run", {alnum});
      const element label = g_.choice(
          "email_label", {{label_run, g_.star("email_label_rest", {g_.plus("hyphens", {b('-')}), label_run})}});
      out = quoted(format, {local, b('@'), label, g_.plus("email_domain", {b('.'), label})});
    }
    if (out)
      formats_.emplace(format, *out);
    return out;
  }

  // The bounds of a numeric range: the least and greatest integers allowed (lo, hi), and
  // the integers next inside the bounds themselves, exclusive or not (edges: ceil of the
  // lower, floor of the upper), absent where unbounded.
  struct int_bounds {
    std::optional<std::int64_t> lo, hi, lo_edge, hi_edge;
  };

  int_bounds integer_bounds(const json::object& o, const std::string& path) {
    int_bounds out;
    constexpr double limit = 9007199254740992.0; // 2^53: doubles hold every integer up to here
    for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      const auto* v = o.if_contains(key);
      if (!v)
        continue;
      const std::string p = child(path, key);
      if (!v->is_number())
        fail(p, "'" + std::string(key) + "' must be a number (draft 4's boolean form is not supported)");
      const double x = v->to_number<double>();
      if (!(std::fabs(x) <= limit))
        fail(p, "'" + std::string(key) + "' beyond +-2^53 is not supported");
      const std::string_view k = key;
      if (k == "minimum" || k == "exclusiveMinimum") {
        double least = std::ceil(x);
        const auto edge = static_cast<std::int64_t>(least);
        out.lo_edge = out.lo_edge ? std::max(*out.lo_edge, edge) : edge;
        if (k == "exclusiveMinimum" && least == x)
          least += 1;
        const auto l = static_cast<std::int64_t>(least);
        out.lo = out.lo ? std::max(*out.lo, l) : l;
      } else {
        double greatest = std::floor(x);
        const auto edge = static_cast<std::int64_t>(greatest);
        out.hi_edge = out.hi_edge ? std::min(*out.hi_edge, edge) : edge;
        if (k == "exclusiveMaximum" && greatest == x)
          greatest -= 1;
        const auto h = static_cast<std::int64_t>(greatest);
        out.hi = out.hi ? std::min(*out.hi, h) : h;
      }
    }
    return out;
  }

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
  std::vector<sequence> magnitudes(std::uint64_t a, std::optional<std::uint64_t> b) {
    std::vector<sequence> out;
    const std::string as = std::to_string(a);
    const std::size_t top = b ? std::to_string(*b).size() : as.size();
    for (std::size_t n = as.size(); n <= top; ++n) {
      const std::string lo = n == as.size() ? as : "1" + std::string(n - 1, '0');
      const std::string hi = b && n == top ? std::to_string(*b) : std::string(n, '9');
      same_length(lo, hi, {}, out);
    }
    if (!b)
      out.push_back(
          {element::any_of({{'1', '9'}}), g_.repeat("more_digits", {digit()}, static_cast<int>(as.size()), -1)});
    return out;
  }

  // Integers in [lo, hi] (either side may be unbounded): a '-' and magnitudes for the
  // negative part, magnitudes for the rest.
  std::vector<sequence> integer_range(std::optional<std::int64_t> lo, std::optional<std::int64_t> hi) {
    std::vector<sequence> out;
    if (!lo || *lo < 0) {
      const std::uint64_t least = hi && *hi < 0 ? static_cast<std::uint64_t>(-*hi) : 1;
      std::optional<std::uint64_t> most;
      if (lo)
        most = static_cast<std::uint64_t>(-*lo);
      if (!most || least <= *most)
        for (auto& m : magnitudes(least, most)) {
          m.insert(m.begin(), element::byte('-'));
          out.push_back(std::move(m));
        }
    }
    if (!hi || *hi >= 0) {
      const std::uint64_t least = lo && *lo > 0 ? static_cast<std::uint64_t>(*lo) : 0;
      std::optional<std::uint64_t> most;
      if (hi)
        most = static_cast<std::uint64_t>(*hi);
      for (auto& m : magnitudes(least, most))
        out.push_back(std::move(m));
    }
    return out;
  }

  element compile_integer(const json::object& o, const std::string& path) {
    const int_bounds b = integer_bounds(o, path);
    if (!b.lo && !b.hi)
      return any_integer();
    if (b.lo && b.hi && *b.lo > *b.hi)
      fail(path, "no integer lies between the schema's minimum and maximum");
    return g_.choice(path + "/integer", integer_range(b.lo, b.hi));
  }

  // "k.ddd" (or "-k.ddd" when `negative`) for integer parts k in [least, most] (most
  // absent: unbounded).
  void add_fractions(std::vector<sequence>& alts, bool negative, std::int64_t least, std::optional<std::int64_t> most,
                     element fraction) {
    if (most && least > *most)
      return;
    for (auto& m : magnitudes(static_cast<std::uint64_t>(least),
                              most ? std::optional(static_cast<std::uint64_t>(*most)) : std::nullopt)) {
      if (negative)
        m.insert(m.begin(), element::byte('-'));
      m.push_back(element::byte('.'));
      m.push_back(fraction);
      alts.push_back(std::move(m));
    }
  }

  element compile_number(const json::object& o, const std::string& path) {
    const int_bounds b = integer_bounds(o, path);
    if (!b.lo && !b.hi)
      return any_number();
    // Integers in range, and k.ddd where k.ddd lies inside for every fraction: plain
    // decimals that need no comparison of fraction digits against the bounds (a subset
    // of the valid numbers when a bound is not an integer; no exponents).
    std::vector<sequence> alts;
    if (!b.lo || !b.hi || *b.lo <= *b.hi)
      alts = integer_range(b.lo, b.hi);
    const element any_fraction = g_.plus("fraction_digits", {digit()});
    const element nonzero_fraction =
        g_.choice("nonzero_fraction", {{g_.star("fraction_digits", {digit()}), element::any_of({{'1', '9'}}),
                                        g_.star("fraction_digits", {digit()})}});
    // "k.ddd" >= k and < k + 1: k from the least allowed integer (or 0) to hi_edge - 1.
    add_fractions(alts, false, b.lo ? std::max<std::int64_t>(*b.lo, 0) : 0,
                  b.hi_edge ? std::optional(*b.hi_edge - 1) : std::nullopt, any_fraction);
    // An exclusive integer lower bound k: "k.ddd" with a fraction above zero.
    if (b.lo && b.lo_edge && *b.lo > *b.lo_edge && *b.lo_edge >= 0 && (!b.hi_edge || *b.lo_edge < *b.hi_edge))
      add_fractions(alts, false, *b.lo_edge, *b.lo_edge, nonzero_fraction);
    // "-m.ddd" <= -m and > -(m + 1): m from the least allowed magnitude (or 0) to -lo_edge - 1.
    add_fractions(alts, true, b.hi ? std::max<std::int64_t>(-*b.hi, 0) : 0,
                  b.lo_edge ? std::optional(-*b.lo_edge - 1) : std::nullopt, any_fraction);
    // An exclusive integer upper bound -m: "-m.ddd" with a fraction above zero.
    if (b.hi && b.hi_edge && *b.hi < *b.hi_edge && *b.hi_edge <= 0 && (!b.lo_edge || *b.lo_edge < *b.hi_edge))
      add_fractions(alts, true, -*b.hi_edge, -*b.hi_edge, nonzero_fraction);
    if (alts.empty())
      fail(path, "bounds this narrow (no integer or integer-and-fraction inside) are not supported for numbers");
    return g_.choice(path + "/number", std::move(alts));
  }

  element compile_object(const json::object& o, const std::string& path) {
    const json::object empty;
    const json::object* props = &empty;
    if (const auto* p = o.if_contains("properties")) {
      if (!p->is_object())
        fail(child(path, "properties"), "'properties' must be an object of schemas");
      props = &p->get_object();
    }
    std::set<std::string> required;
    if (const auto* r = o.if_contains("required")) {
      const std::string rp = child(path, "required");
      if (!r->is_array())
        fail(rp, "'required' must be an array of property names");
      for (std::size_t i = 0; i < r->get_array().size(); ++i) {
        const auto& name = r->get_array()[i];
        if (!name.is_string())
          fail(child(rp, i), "'required' must be an array of property names");
        if (!props->contains(name.get_string()))
          fail(child(rp, i),
               "'required' names '" + std::string(name.get_string()) + "', which 'properties' does not define");
        required.emplace(name.get_string());
      }
    }
    const json::value* additional = o.if_contains("additionalProperties");
    if (additional && !additional->is_bool() && !additional->is_object())
      fail(child(path, "additionalProperties"), "'additionalProperties' must be a boolean or a schema");
    if (props->empty()) {
      if (!additional || (additional->is_bool() && additional->get_bool()))
        return any_object();
      if (additional->is_bool())
        return g_.choice(path + "/object", {{element::byte('{'), ws(), element::byte('}')}});
      const element value = compile(*additional, child(path, "additionalProperties"));
      const int id = g_.add_rule(path + "/object");
      object_of(id, value, path + "/object");
      return element::ref(id);
    }
    if (additional && additional->is_object()) // checked, though only declared properties are written
      (void)compile(*additional, child(path, "additionalProperties"));

    // One member per property, "key": value.
    const std::string pp = child(path, "properties");
    std::vector<sequence> members;
    std::vector<bool> is_required;
    for (const auto& kv : *props) {
      const std::string p = child(pp, kv.key());
      sequence m = lit(json::serialize(json::string(kv.key())));
      append(m, {ws(), element::byte(':'), ws(), compile(kv.value(), p)});
      members.push_back(std::move(m));
      is_required.push_back(required.count(std::string(kv.key())) > 0);
    }
    // after[i]: the members from i on, when one was written before (each starts with a
    // comma); first[i]: the same when none was, non-empty. Optional members may be left
    // out, the order stays the schema's.
    const std::size_t n = members.size();
    std::vector<int> after(n + 1), first(n + 1, -1);
    after[n] = g_.add_rule(path + "/after", {{}});
    for (std::size_t i = n; i-- > 0;) {
      after[i] = g_.add_rule(path + "/after");
      sequence with{ws(), element::byte(','), ws()};
      append(with, members[i]);
      with.push_back(element::ref(after[i + 1]));
      g_.add_alternative(after[i], std::move(with));
      if (!is_required[i])
        g_.add_alternative(after[i], {element::ref(after[i + 1])});
    }
    for (std::size_t i = n; i-- > 0;) {
      first[i] = g_.add_rule(path + "/first");
      sequence with = members[i];
      with.push_back(element::ref(after[i + 1]));
      g_.add_alternative(first[i], std::move(with));
      if (!is_required[i] && first[i + 1] >= 0)
        g_.add_alternative(first[i], {element::ref(first[i + 1])});
    }
    std::vector<sequence> alts;
    alts.push_back({element::byte('{'), ws(), element::ref(first[0]), ws(), element::byte('}')});
    if (required.empty())
      alts.push_back({element::byte('{'), ws(), element::byte('}')});
    return g_.choice(path + "/object", std::move(alts));
  }

  element compile_array(const json::object& o, const std::string& path) {
    if (const auto* u = o.if_contains("uniqueItems"); u && !(u->is_bool() && !u->get_bool()))
      fail(child(path, "uniqueItems"), "'uniqueItems' is not supported (only false)");
    std::vector<element> prefix;
    if (const auto* p = o.if_contains("prefixItems")) {
      const std::string pp = child(path, "prefixItems");
      if (!p->is_array())
        fail(pp, "'prefixItems' must be an array of schemas");
      for (std::size_t i = 0; i < p->get_array().size(); ++i)
        prefix.push_back(compile(p->get_array()[i], child(pp, i)));
    }
    std::optional<element> item; // absent: no items after the prefix
    if (const auto* it = o.if_contains("items")) {
      if (it->is_array())
        fail(child(path, "items"), "'items' as an array (draft 4 tuples) is not supported; use 'prefixItems'");
      if (!(it->is_bool() && !it->get_bool()))
        item = compile(*it, child(path, "items"));
    } else {
      item = any_value();
    }
    const int k = static_cast<int>(prefix.size());
    const int min = count_keyword(o, "minItems", path).value_or(0);
    int max = count_keyword(o, "maxItems", path).value_or(-1);
    if (!item)
      max = max < 0 ? k : std::min(max, k);
    if (max >= 0 && min > max)
      fail(path, "'minItems' is above 'maxItems' (or the items 'prefixItems' and 'items' allow)");
    const sequence comma{ws(), element::byte(','), ws()};
    auto at = [&](int j) { return j < k ? prefix[static_cast<std::size_t>(j)] : *item; };
    // tail(j): the items after the first j, each after a comma.
    auto tail = [&](auto&& self, int j) -> element {
      if (j >= k) {
        if (!item || max == j)
          return g_.choice(path + "/end", {{}});
        sequence one = comma;
        one.push_back(*item);
        return g_.repeat(path + "/items", std::move(one), std::max(0, min - j), max < 0 ? -1 : max - j);
      }
      std::vector<sequence> alts;
      if (max < 0 || j < max) {
        sequence one = comma;
        one.push_back(at(j));
        one.push_back(self(self, j + 1));
        alts.push_back(std::move(one));
      }
      if (j >= min)
        alts.push_back({});
      return g_.choice(path + "/tail", std::move(alts));
    };
    std::vector<sequence> alts;
    if (min == 0)
      alts.push_back({element::byte('['), ws(), element::byte(']')});
    if (max != 0)
      alts.push_back({element::byte('['), ws(), at(0), tail(tail, 1), ws(), element::byte(']')});
    return g_.choice(path + "/array", std::move(alts));
  }

  grammar g_;
  const json::value& root_;
  std::map<std::string, int> refs_;
  std::map<std::string, element> formats_;
  std::optional<element> ws_, string_char_, any_string_, digits_, any_integer_, any_number_, any_value_, any_object_,
      any_array_;
};

// Errors of the grammar's own limits carry the request field too.
template <typename F>
grammar with_param(F&& f) {
  try {
    return f();
  } catch (const invalid_argument_error& e) {
    if (e.param == param)
      throw;
    throw invalid_argument_error(e.what(), param);
  }
}

} // namespace

grammar any_json_grammar() {
  const json::value none;
  return with_param([&] { return schema_compiler(none).compile_any_object(); });
}

grammar json_schema_grammar(const json::value& schema) {
  return with_param([&] { return schema_compiler(schema).compile_root(); });
}

} // namespace troupe::runtime::structured
