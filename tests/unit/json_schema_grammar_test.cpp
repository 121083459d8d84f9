// JSON Schema to grammar: what a schema's grammar derives is JSON that the schema accepts,
// the compact text of every value the schema accepts is derived, whitespace is bounded,
// and everything outside the supported subset is refused by name with its path.
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <charconv>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "runtime/errors.hpp"
#include "runtime/structured/json_schema_grammar.hpp"
#include "tests/support/grammar_recognizer.hpp"
#include "tests/support/grammar_sampler.hpp"
#include "tests/support/json_schema_validator.hpp"
#include "tests/support/random_instance.hpp"
#include "tests/support/random_schema.hpp"
#include "tests/support/sweep.hpp"

namespace json = boost::json;
using troupe::invalid_argument_error;
using troupe::runtime::structured::any_json_grammar;
using troupe::runtime::structured::grammar;
using troupe::runtime::structured::json_schema_grammar;
using troupe::test::grammar_recognizer;
using troupe::test::grammar_sampler;
using troupe::test::validates;

namespace {

// Compact JSON as a model is expected to write it: numbers in their shortest form,
// integral doubles without an exponent (boost::json would write 1.5 as "1.5E0").
std::string compact(const json::value& v) {
  switch (v.kind()) {
    case json::kind::object: {
      std::string out = "{";
      for (const auto& kv : v.get_object()) {
        if (out.size() > 1)
          out += ",";
        out += json::serialize(json::value(kv.key())) + ":" + compact(kv.value());
      }
      return out + "}";
    }
    case json::kind::array: {
      std::string out = "[";
      for (const auto& x : v.get_array()) {
        if (out.size() > 1)
          out += ",";
        out += compact(x);
      }
      return out + "]";
    }
    case json::kind::double_: {
      const double d = v.get_double() == 0 ? 0.0 : v.get_double(); // -0 is written 0
      char buf[512];
      const auto r = std::floor(d) == d ? std::to_chars(buf, buf + sizeof buf, d, std::chars_format::fixed)
                                        : std::to_chars(buf, buf + sizeof buf, d);
      return std::string(buf, r.ptr);
    }
    default:
      return json::serialize(v);
  }
}

bool finite_numbers(const json::value& v) {
  if (v.is_double())
    return std::isfinite(v.get_double());
  if (v.is_array())
    for (const auto& x : v.get_array())
      if (!finite_numbers(x))
        return false;
  if (v.is_object())
    for (const auto& kv : v.get_object())
      if (!finite_numbers(kv.value()))
        return false;
  return true;
}

struct compiled {
  explicit compiled(const char* schema) : g(json_schema_grammar(json::parse(schema))) {}
  explicit compiled(const json::value& schema) : g(json_schema_grammar(schema)) {}
  bool accepts(std::string_view text) { return grammar_recognizer(g).matches(text); }
  grammar g;
};

// The message of the refusal `schema` gets, or "" when it compiles.
std::string refusal(const char* schema) {
  try {
    json_schema_grammar(json::parse(schema));
  } catch (const invalid_argument_error& e) {
    CHECK(e.param == "response_format");
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

// A random JSON value, for json_object mode.
json::value random_json(std::mt19937_64& rng, int depth) {
  auto between = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  switch (between(0, depth >= 3 ? 5 : 7)) {
    case 0:
      return nullptr;
    case 1:
      return between(0, 1) == 1;
    case 2:
      return between(-100000, 100000);
    case 3:
      return between(-1000, 1000) / 8.0 + 0.0625;
    case 4: {
      static const std::vector<std::string> strings = {
          "", "plain", "quote\"back\\slash", "\n\t\x01", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "/"};
      return json::string(strings[static_cast<std::size_t>(between(0, 5))]);
    }
    case 5:
      return 1e300;
    case 6: {
      json::array a;
      for (int i = between(0, 3); i > 0; --i)
        a.push_back(random_json(rng, depth + 1));
      return a;
    }
    default: {
      json::object o;
      for (int i = between(0, 3); i > 0; --i)
        o["k" + std::to_string(between(0, 9))] = random_json(rng, depth + 1);
      return o;
    }
  }
}

} // namespace

TEST_CASE("a closed object derives its required properties in the schema's order with bounded whitespace") {
  compiled c(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},
                 "required":["name","age"],"additionalProperties":false})");
  CHECK(c.accepts(R"({"name":"Ann","age":42})"));
  CHECK(c.accepts(R"({ "name": "Ann", "age": -7 })"));
  CHECK(c.accepts("{\n\"name\" : \"Ann\" ,\n\"age\":0\n}"));
  CHECK_FALSE(c.accepts(R"({"age":42,"name":"Ann"})"));       // order is the schema's
  CHECK_FALSE(c.accepts(R"({"name":"Ann"})"));                // age is required
  CHECK_FALSE(c.accepts(R"({"name":"Ann","age":42,"x":1})")); // closed
  CHECK_FALSE(c.accepts(R"({"name":"Ann","age":4.5})"));      // integer
  CHECK_FALSE(c.accepts(R"({"name":"Ann","age":042})"));      // JSON numbers
  CHECK_FALSE(c.accepts(R"({"name":"Ann",   "age":42})"));    // three spaces
  CHECK_FALSE(c.accepts(" {\"name\":\"Ann\",\"age\":42}"));   // nothing around the value
  CHECK_FALSE(c.accepts("{\"name\":\"Ann\",\t\"age\":42}"));  // tabs are not allowed
}

TEST_CASE("optional properties may be left out in any combination and commas stay right") {
  compiled c(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},
                 "c":{"type":"integer"}},"required":["b"]})");
  for (const char* ok : {R"({"b":1})", R"({"a":1,"b":2})", R"({"b":2,"c":3})", R"({"a":1,"b":2,"c":3})"})
    CHECK(c.accepts(ok));
  for (const char* bad :
       {"{}", R"({"a":1})", R"({,"b":1})", R"({"b":1,})", R"({"a":1,,"b":2})", R"({"c":3,"b":2})", R"({"a":1,"c":3})"})
    CHECK_FALSE(c.accepts(bad));
  compiled none(R"({"type":"object","properties":{"a":{"type":"null"},"b":{"type":"boolean"}}})");
  for (const char* ok : {"{}", "{ }", R"({"a":null})", R"({"b":true})", R"({"a":null,"b":false})"})
    CHECK(none.accepts(ok));
  CHECK_FALSE(none.accepts(R"({"b":true,"a":null})"));
}

TEST_CASE("objects without properties follow additionalProperties") {
  compiled any(R"({"type":"object"})");
  CHECK(any.accepts(R"({"x":[1,{"y":null}],"z":"w"})"));
  CHECK_FALSE(any.accepts("[]"));
  compiled empty(R"({"type":"object","additionalProperties":false})");
  CHECK(empty.accepts("{}"));
  CHECK_FALSE(empty.accepts(R"({"x":1})"));
  compiled map(R"({"type":"object","additionalProperties":{"type":"integer"}})");
  CHECK(map.accepts(R"({"x":1,"y":2})"));
  CHECK_FALSE(map.accepts(R"({"x":"1"})"));
  // additionalProperties true alongside properties: only the declared ones are written.
  compiled declared(R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":true})");
  CHECK(declared.accepts(R"({"a":1})"));
  CHECK_FALSE(declared.accepts(R"({"a":1,"b":2})"));
}

TEST_CASE("strings take escapes and UTF-8 but no raw control characters and count code points") {
  compiled s(R"({"type":"string"})");
  for (const char* ok :
       {R"("")", R"("a\"b\\c\/d\b\f\n\r\t")", R"("\u00e9\uD83D\uDE00")", "\"\xc3\xa9\xf0\x9f\x98\x80\""})
    CHECK(s.accepts(ok));
  for (const char* bad : {"\"a\nb\"", "\"\x01\"", R"("\x")", R"("\uD800")", R"("\uDC00\uD800")", "\"\xc3\"",
                          "\"\xed\xa0\x80\"", "\"abc", "abc"})
    CHECK_FALSE(s.accepts(bad));
  compiled bounded(R"({"type":"string","minLength":2,"maxLength":3})");
  CHECK_FALSE(bounded.accepts(R"("a")"));
  CHECK(bounded.accepts(R"("ab")"));
  CHECK(bounded.accepts("\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"")); // three code points
  CHECK(bounded.accepts(R"("\n\uD83D\uDE00")"));                      // an escape, a pair: two
  CHECK_FALSE(bounded.accepts(R"("abcd")"));
}

TEST_CASE("numbers follow the JSON grammar and integer bounds are exact") {
  compiled n(R"({"type":"number"})");
  for (const char* ok : {"0", "-0", "12", "-3.25", "1e5", "1E+5", "2.5e-3"})
    CHECK(n.accepts(ok));
  for (const char* bad : {"01", "+1", ".5", "1.", "1e", "NaN", "Infinity", "0x10", "1e1234"})
    CHECK_FALSE(n.accepts(bad));
  compiled r(R"({"type":"integer","minimum":-15,"exclusiveMaximum":120})");
  for (int k = -200; k <= 200; ++k)
    CHECK_MESSAGE(r.accepts(std::to_string(k)) == (k >= -15 && k < 120), k);
  compiled positive(R"({"type":"integer","exclusiveMinimum":0})");
  CHECK(positive.accepts("1"));
  CHECK(positive.accepts("98765432109876"));
  CHECK_FALSE(positive.accepts("0"));
  CHECK_FALSE(positive.accepts("-5"));
  compiled upto(R"({"type":"integer","maximum":-10})");
  CHECK(upto.accepts("-10"));
  CHECK(upto.accepts("-123456"));
  CHECK_FALSE(upto.accepts("-9"));
  CHECK_FALSE(upto.accepts("5"));
  compiled bounded(R"({"type":"number","minimum":-2,"maximum":3})");
  for (const char* ok : {"-2", "-1.5", "-0.25", "0", "0.5", "2.999", "3"})
    CHECK(bounded.accepts(ok));
  for (const char* bad : {"-2.5", "3.5", "4", "3.01", "1e0"})
    CHECK_FALSE(bounded.accepts(bad));
  // Exclusive integer bounds keep the fractions next to them, without the bound itself.
  compiled above_zero(R"({"type":"number","exclusiveMinimum":0})");
  for (const char* ok : {"0.5", "0.001", "1", "7.0", "123.25"})
    CHECK(above_zero.accepts(ok));
  for (const char* bad : {"0", "0.0", "0.000", "-0.5", "-1"})
    CHECK_FALSE(above_zero.accepts(bad));
  compiled unit(R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1})");
  CHECK(unit.accepts("0.25"));
  CHECK_FALSE(unit.accepts("0"));
  CHECK_FALSE(unit.accepts("1"));
  CHECK_FALSE(unit.accepts("1.5"));
  compiled below_zero(R"({"type":"number","exclusiveMaximum":0,"minimum":-2})");
  for (const char* ok : {"-0.5", "-1", "-1.75", "-2"})
    CHECK(below_zero.accepts(ok));
  for (const char* bad : {"0", "-0.0", "-2.5", "0.5"})
    CHECK_FALSE(below_zero.accepts(bad));
}

TEST_CASE("formats date, time, date-time, uuid, ipv4 and email derive their shapes") {
  compiled date(R"({"type":"string","format":"date"})");
  CHECK(date.accepts(R"("2024-02-29")"));
  CHECK(date.accepts(R"("1999-12-31")"));
  for (const char* bad : {R"("2024-02-30")", R"("2024-04-31")", R"("2024-13-01")", R"("2024-00-10")", R"("24-01-01")"})
    CHECK_FALSE(date.accepts(bad));
  compiled time(R"({"type":"string","format":"time"})");
  CHECK(time.accepts(R"("23:59:59Z")"));
  CHECK(time.accepts(R"("08:00:00.123+05:30")"));
  CHECK_FALSE(time.accepts(R"("24:00:00Z")"));
  CHECK_FALSE(time.accepts(R"("08:00:00")"));
  compiled dt(R"({"type":"string","format":"date-time"})");
  CHECK(dt.accepts(R"("2024-06-01T12:30:00Z")"));
  CHECK_FALSE(dt.accepts(R"("2024-06-01 12:30:00Z")"));
  compiled uuid(R"({"type":"string","format":"uuid"})");
  CHECK(uuid.accepts(R"("123e4567-e89b-12d3-a456-426614174000")"));
  CHECK_FALSE(uuid.accepts(R"("123e4567e89b12d3a456426614174000")"));
  compiled ip(R"({"type":"string","format":"ipv4"})");
  CHECK(ip.accepts(R"("192.168.0.255")"));
  CHECK_FALSE(ip.accepts(R"("256.1.1.1")"));
  CHECK_FALSE(ip.accepts(R"("01.1.1.1")"));
  compiled email(R"({"type":"string","format":"email"})");
  CHECK(email.accepts(R"("first.last+tag@mail.example-host.org")"));
  for (const char* bad : {R"("a@b")", R"("a..b@c.d")", R"("a@-b.c")", R"("@b.c")", R"("a b@c.d")"})
    CHECK_FALSE(email.accepts(bad));
  compiled other(R"({"type":"string","format":"uri"})"); // an annotation: any string
  CHECK(other.accepts(R"("not a uri")"));
}

TEST_CASE("arrays follow items, prefixItems, minItems and maxItems") {
  compiled a(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})");
  CHECK_FALSE(a.accepts("[]"));
  CHECK(a.accepts("[1]"));
  CHECK(a.accepts("[1, 2,3]"));
  CHECK_FALSE(a.accepts("[1,2,3,4]"));
  CHECK_FALSE(a.accepts("[1,]"));
  compiled t(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"boolean"}],"items":false})");
  for (const char* ok : {"[]", R"(["a"])", R"(["a",true])"})
    CHECK(t.accepts(ok));
  for (const char* bad : {"[true]", R"(["a",true,1])", R"(["a","b"])"})
    CHECK_FALSE(t.accepts(bad));
  compiled rest(R"({"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"null"},"minItems":2})");
  CHECK(rest.accepts(R"(["a",null])"));
  CHECK(rest.accepts(R"(["a",null,null])"));
  CHECK_FALSE(rest.accepts(R"(["a"])"));
  CHECK_FALSE(rest.accepts(R"([null,null])"));
  compiled any(R"({"type":"array"})");
  CHECK(any.accepts(R"([1,"x",[{}],null])"));
}

TEST_CASE("enum and const derive the values' compact text and type lists combine") {
  compiled e(R"({"enum":["red",1.5,2.0,null,[1,{"a":"b"}],true]})");
  for (const char* ok : {R"("red")", "1.5", "2", "null", R"([1,{"a":"b"}])", "true"})
    CHECK(e.accepts(ok));
  for (const char* bad : {R"("blue")", "1.50", "false", R"([1, {"a":"b"}])"})
    CHECK_FALSE(e.accepts(bad));
  compiled typed(R"({"type":"string","enum":["a",1,"b"]})");
  CHECK(typed.accepts(R"("b")"));
  CHECK_FALSE(typed.accepts("1"));
  compiled k(R"({"const":"fixed","description":"only this"})");
  CHECK(k.accepts(R"("fixed")"));
  CHECK_FALSE(k.accepts(R"("other")"));
  compiled list(R"({"type":["integer","null"]})");
  CHECK(list.accepts("null"));
  CHECK(list.accepts("7"));
  CHECK_FALSE(list.accepts(R"("7")"));
  compiled nullable(R"({"type":"string","nullable":true})");
  CHECK(nullable.accepts("null"));
}

TEST_CASE("anyOf, oneOf, allOf and recursive refs through $defs and definitions compile") {
  compiled any(R"({"anyOf":[{"type":"integer"},{"type":"object","properties":{"k":{"type":"string"}},
                   "required":["k"]}]})");
  CHECK(any.accepts("3"));
  CHECK(any.accepts(R"({"k":"v"})"));
  CHECK_FALSE(any.accepts(R"("3")"));
  compiled one(R"({"oneOf":[{"type":"boolean"},{"type":"null"}]})");
  CHECK(one.accepts("null"));
  compiled all(R"({"allOf":[{"$ref":"#/definitions/n"}],"definitions":{"n":{"type":"null"}}})");
  CHECK(all.accepts("null"));
  compiled tree(R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{
                    "v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},
                    "required":["v"],"additionalProperties":false}}})");
  CHECK(tree.accepts(R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4,"kids":[]}]}]})"));
  CHECK_FALSE(tree.accepts(R"({"v":1,"kids":[{"kids":[]}]})"));
  compiled root_ref(R"({"type":"object","properties":{"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},
                        "required":["next"]})");
  CHECK(root_ref.accepts(R"({"next":{"next":{"next":null}}})"));
  compiled escaped(R"({"$ref":"#/$defs/a~1b~0c","$defs":{"a/b~c":{"type":"boolean"}}})");
  CHECK(escaped.accepts("false"));
}

TEST_CASE("annotations are ignored and OpenAI strict schemas compile") {
  compiled c(R"({"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"x","title":"T",
                 "description":"d","strict":true,"type":"object","examples":[{}],"$comment":"c",
                 "properties":{"when":{"type":"string","format":"date-time","default":"2024-01-01T00:00:00Z",
                 "deprecated":false,"readOnly":true,"writeOnly":false},
                 "tags":{"type":"array","items":{"type":"string"},"description":"tags"},
                 "score":{"anyOf":[{"type":"number"},{"type":"null"}]}},
                 "required":["when","tags","score"],"additionalProperties":false})");
  CHECK(c.accepts(R"({"when":"2024-05-06T07:08:09.5-01:00","tags":["a","b"],"score":null})"));
  CHECK(c.accepts(R"({"when": "2024-05-06T07:08:09Z", "tags": [], "score": 0.75})"));
}

TEST_CASE("pattern: the decoded string contains a match, anchors fix where, JSON escapes stay exact") {
  compiled code(R"({"type":"string","pattern":"^[A-Z]{2}-[0-9]{3}$"})");
  CHECK(code.accepts(R"("AB-123")"));
  CHECK_FALSE(code.accepts(R"("AB-1234")"));
  CHECK_FALSE(code.accepts(R"(" AB-123")"));
  // Unanchored: a match anywhere; anchored at one end only: the match at that end.
  compiled anywhere(R"({"pattern":"ab+c"})");
  CHECK(anywhere.accepts(R"("xx abbc yy")"));
  CHECK(anywhere.accepts(R"("abc")"));
  CHECK_FALSE(anywhere.accepts(R"("ac")"));
  compiled starts(R"({"type":"string","pattern":"^go"})");
  CHECK(starts.accepts(R"("gone")"));
  CHECK_FALSE(starts.accepts(R"("ago")"));
  compiled ends(R"({"type":"string","pattern":"\\$$"})"); // a literal '$' at the end
  CHECK(ends.accepts(R"("cost: 5$")"));
  CHECK_FALSE(ends.accepts(R"("$5")"));
  // Characters a JSON string must escape are written as their escapes, and only so.
  compiled escaped(R"({"type":"string","pattern":"^a\"b\\\\c\n\u0001$"})");
  CHECK(escaped.accepts(R"("a\"b\\c\n\u0001")"));
  CHECK_FALSE(escaped.accepts("\"a\\\"b\\\\c\n\\u0001\"")); // a raw newline is no JSON
  compiled any_char(R"({"type":"string","pattern":"^.$"})");
  CHECK(any_char.accepts(R"("\"")"));
  CHECK(any_char.accepts(R"("\t")"));
  CHECK(any_char.accepts(R"("é")"));
  CHECK_FALSE(any_char.accepts(R"(""")"));
}

TEST_CASE("pattern: strings derived from 200 patterns parse, decode and match by PCRE2") {
  const std::vector<std::string> patterns = {
      "^[a-z]+@[a-z]+\\.(com|org)$", "^\\d{3}-\\d{4}$", "^(yes|no|maybe)$", "[\"\\\\]+", "^\\s*x\\s*$",
      "^[^a-z]{2,5}$", "^(ab|cd)*e?$", "^\\w+( \\w+){0,3}$", "q", "^\\p?$"};
  std::mt19937_64 rng(5);
  int checked = 0;
  for (std::size_t i = 0; i < 200; ++i) {
    const std::string& pattern = patterns[i % patterns.size()];
    if (pattern == "^\\p?$")
      continue; // \p is a property escape: refused below
    json::object schema{{"type", "string"}, {"pattern", pattern}};
    INFO(pattern);
    grammar g = json_schema_grammar(schema);
    grammar_sampler sampler(g, 40);
    const std::string text = sampler.sample(rng);
    INFO(text);
    json::error_code ec;
    const auto v = json::parse(text, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    REQUIRE(v.is_string());
    std::string why;
    CHECK_MESSAGE(validates(schema, v, &why), why);
    ++checked;
  }
  CHECK(checked == 180);
  CHECK(contains(refusal(R"({"type":"string","pattern":"^\\p{L}$"})"), "#/pattern"));
}

TEST_CASE("unsupported keywords, bad values, bad refs and bounds past the limits are refused by name and path") {
  struct refused {
    const char* schema;
    std::vector<const char*> parts;
  };
  const std::vector<refused> cases = {
      {R"({"type":"object","properties":{"age":{"type":"integer","multipleOf":5}}})",
       {"#/properties/age/multipleOf", "'multipleOf' is not supported"}},
      {R"({"type":"string","pattern":"a(b"})", {"#/pattern", "'pattern' cannot be compiled"}},
      {R"({"type":"string","pattern":"(a)\\1"})", {"#/pattern", "'pattern' cannot be compiled"}},
      {R"({"type":"string","pattern":5})", {"#/pattern", "must be a string"}},
      {R"({"type":"string","pattern":"a","maxLength":3})", {"#/maxLength", "alongside 'pattern'"}},
      {R"({"type":"string","pattern":"a","format":"date"})", {"#/format", "alongside 'pattern'"}},
      {R"({"type":"object","patternProperties":{"a":{}}})", {"'patternProperties'"}},
      {R"({"type":"object","minProperties":1})", {"'minProperties'"}},
      {R"({"not":{"type":"null"}})", {"'not'"}},
      {R"({"if":{"type":"null"},"then":{}})", {"'if'"}},
      {R"({"type":"array","uniqueItems":true})", {"'uniqueItems'"}},
      {R"({"type":"array","contains":{"type":"null"}})", {"'contains'"}},
      {R"({"type":"array","items":[{"type":"null"}]})", {"'items'", "prefixItems"}},
      {R"({"type":"array","maxItems":20000})", {"#/maxItems", "'maxItems'", "10000"}},
      {R"({"type":"string","maxLength":100000})", {"'maxLength'", "10000"}},
      {R"({"type":"string","minLength":-1})", {"'minLength'"}},
      {R"({"type":"array","minItems":3,"maxItems":2})", {"'minItems'"}},
      {R"({"type":"string","minLength":5,"maxLength":2})", {"'minLength'"}},
      {R"({"type":"widget"})", {"#/type", "widget"}},
      {R"({"type":"object","properties":{"a":{}},"required":["b"]})", {"#/required/0", "'b'"}},
      {R"({"$ref":"#/$defs/missing"})", {"#/$ref", "'$ref'", "missing"}},
      {R"({"$ref":"https://example.com/schema.json"})", {"'$ref'", "https://example.com/schema.json"}},
      {R"({"$ref":"#/$defs/a","type":"object","$defs":{"a":{}}})", {"'type'", "'$ref'"}},
      {R"({"anyOf":[{"type":"null"}],"type":"null"})", {"'type'", "'anyOf'"}},
      {R"({"allOf":[{"type":"null"},{"type":"boolean"}]})", {"'allOf'"}},
      {R"({"anyOf":[]})", {"'anyOf'"}},
      {R"({"enum":["a"],"minLength":1})", {"'minLength'", "'enum'"}},
      {R"({"enum":[]})", {"'enum'"}},
      {R"({"type":"integer","enum":["a"]})", {"'enum'"}},
      {R"({"type":"integer","minimum":true})", {"'minimum'"}},
      {R"({"type":"integer","minimum":1e300})", {"'minimum'"}},
      {R"({"type":"integer","minimum":5,"maximum":4})", {"minimum", "maximum"}},
      {R"({"type":"string","format":"date","maxLength":3})", {"'maxLength'", "'format'"}},
      {R"({"type":"object","properties":{"x":false}})", {"#/properties/x", "false"}},
      {R"("string")", {"#", "a schema must be a JSON object or a boolean"}},
      {R"([{"type":"null"}])", {"a schema must be a JSON object or a boolean"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":"no"})",
       {"'additionalProperties'"}},
      // A node that must contain a node has no finite value.
      {R"({"$ref":"#/$defs/n","$defs":{"n":{"type":"object","properties":{"c":{"$ref":"#/$defs/n"}},
          "required":["c"]}}})",
       {"#/$defs/n", "no finite JSON value"}},
      // A reference to itself before any character: left recursion, reported for this field.
      {R"({"$ref":"#/$defs/a","$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}}})", {"left-recursive"}},
  };
  for (const auto& c : cases) {
    const std::string message = refusal(c.schema);
    INFO(c.schema);
    INFO(message);
    CHECK_FALSE(message.empty());
    for (const char* part : c.parts)
      CHECK(contains(message, part));
  }
}

TEST_CASE("a schema past the grammar's size limit is refused for response_format") {
  std::string schema = R"({"type":"object","properties":{)";
  for (int i = 0; i < 40; ++i)
    schema += (i ? "," : "") + std::string("\"p") + std::to_string(i) + R"(":{"type":"string","maxLength":10000})";
  schema += "}}";
  const std::string message = refusal(schema.c_str());
  CHECK(contains(message, "grammar elements"));
}

TEST_CASE("a large maxItems within the limit compiles") {
  compiled c(R"({"type":"array","items":{"type":"integer"},"maxItems":10000})");
  CHECK(c.accepts("[1,2,3]"));
}

TEST_CASE("hand-written valid instances written compactly are derived") {
  struct both {
    const char* schema;
    std::vector<const char*> instances;
  };
  const std::vector<both> cases = {
      {R"({"type":"object","properties":{"n":{"type":"integer","minimum":0,"maximum":9},
           "s":{"type":"string","maxLength":4},"e":{"enum":[-0.125,1e21,"x"]}},"required":["n"]})",
       {R"({"n":0})", R"({"n":9,"s":"abcd"})", R"({"n":3,"e":-0.125})", R"({"n":3,"s":"","e":1000000000000000000000})",
        R"({"n":5,"e":"x"})"}},
      {R"({"type":"array","prefixItems":[{"type":"integer"}],"items":{"type":"string","format":"email"},
           "maxItems":3})",
       {"[]", "[1]", R"([1,"a@b.co"])", R"([-1,"a.b@c.d","x_y+z@q-r.s.t"])"}},
      {R"({"type":"object","additionalProperties":{"type":"array","items":{"type":"boolean"}}})",
       {"{}", R"({"a":[true],"b":[]})"}},
      {R"({"type":"number","minimum":-3,"exclusiveMaximum":2})", {"-3", "-2.5", "0", "1.25", "-0.5"}},
  };
  for (const auto& c : cases) {
    const json::value schema = json::parse(c.schema);
    compiled g(schema);
    for (const char* text : c.instances) {
      INFO(c.schema);
      INFO(text);
      const json::value v = json::parse(text);
      std::string why;
      REQUIRE_MESSAGE(validates(schema, v, &why), why);
      CHECK(compact(v) == text);
      CHECK(g.accepts(compact(v)));
    }
  }
}

TEST_CASE("2000 random schemas compile and their grammars derive only valid JSON that the schema accepts") {
  troupe::test::random_schema schemas(20261206);
  std::mt19937_64 rng(7);
  int derived = 0, recognized = 0;
  const int cases = troupe::testing::sweep_cases(2000);
  for (int i = 0; i < cases; ++i) {
    const json::value schema = schemas.next();
    INFO(json::serialize(schema));
    grammar g;
    REQUIRE_NOTHROW(g = json_schema_grammar(schema));
    grammar_sampler sampler(g, 120);
    grammar_recognizer recognizer(g);
    for (int k = 0; k < 20; ++k) {
      const std::string text = sampler.sample(rng);
      INFO(text);
      json::error_code ec;
      const json::value v = json::parse(text, ec);
      REQUIRE_MESSAGE(!ec, ec.message());
      std::string why;
      REQUIRE_MESSAGE(validates(schema, v, &why), why);
      ++derived;
      // The same value, written compactly (escapes, whitespace and number forms
      // normalized), is derived too.
      if (finite_numbers(v)) {
        const std::string tight = compact(v);
        INFO(tight);
        REQUIRE(recognizer.matches(tight));
        ++recognized;
      }
    }
  }
  CHECK(derived == 20 * cases);
  CHECK(recognized > 39 * derived / 40); // all but the values with non-finite numbers
}

TEST_CASE("values drawn from 2000 random schemas themselves, written compactly, are derived by their grammars") {
  troupe::test::random_schema schemas(20261206);
  std::mt19937_64 rng(13);
  int checked = 0;
  const int cases = troupe::testing::sweep_cases(2000);
  for (int i = 0; i < cases; ++i) {
    const json::value schema = schemas.next();
    INFO(json::serialize(schema));
    const grammar g = json_schema_grammar(schema);
    grammar_recognizer recognizer(g);
    troupe::test::random_instance instances(schema, rng);
    for (int k = 0; k < 10; ++k) {
      const json::value v = instances.make();
      const std::string text = compact(v);
      INFO(text);
      std::string why;
      REQUIRE_MESSAGE(validates(schema, v, &why), why); // the drawing itself is right
      REQUIRE(recognizer.matches(text));
      ++checked;
    }
  }
  CHECK(checked == 10 * cases);
}

TEST_CASE("json_object mode derives any JSON object and refuses other top-level values") {
  const grammar g = any_json_grammar();
  grammar_recognizer recognizer(g);
  std::mt19937_64 rng(11);
  int objects = 0;
  for (int i = 0; i < 3000; ++i) {
    const json::value v = random_json(rng, 0);
    const std::string text = compact(v);
    INFO(text);
    CHECK(recognizer.matches(text) == v.is_object());
    objects += v.is_object();
  }
  CHECK(objects > 100);
  for (const char* bad : {"[]", "1", R"("s")", "null", "{", R"({"a":})", R"({"a":1,})", R"({a:1})"})
    CHECK_FALSE(recognizer.matches(bad));
  CHECK(recognizer.matches(R"({ "a": [1, {"b": null}], "c": "\u00e9" })"));
  grammar_sampler sampler(g, 300);
  for (int i = 0; i < 500; ++i) {
    const std::string text = sampler.sample(rng);
    json::error_code ec;
    const json::value v = json::parse(text, ec);
    INFO(text);
    REQUIRE_MESSAGE(!ec, ec.message());
    CHECK(v.is_object());
  }
}
