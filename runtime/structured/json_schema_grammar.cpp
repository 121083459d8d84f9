// The JSON Schema compiler: one walk over the schema that checks its keywords and writes a
// rule per subschema, from the shared JSON rules, numeric ranges and string formats.
#include "runtime/structured/json_schema_grammar.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "runtime/errors.hpp"
#include "runtime/structured/integer_range_grammar.hpp"
#include "runtime/structured/json_value_grammar.hpp"
#include "runtime/structured/regex_grammar.hpp"
#include "runtime/structured/string_format_grammar.hpp"

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
    "pattern",
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
    {"maxLength", "string"},  {"format", "string"},           {"pattern", "string"},
    {"minimum", "number"},
    {"maximum", "number"},    {"exclusiveMinimum", "number"}, {"exclusiveMaximum", "number"},
};
const std::vector<std::string> all_types = {"null", "boolean", "object", "array", "number", "string", "integer"};

class schema_compiler {
 public:
  explicit schema_compiler(const json::value& root) : root_(root) {}

  grammar compile_root() {
    const element top = compile(root_, "#");
    g_.set_root(g_.add_rule("root", {{top}}));
    return finish();
  }

  grammar compile_any_object() {
    g_.set_root(g_.add_rule("root", {{json_.any_object()}}));
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

  element compile(const json::value& s, const std::string& path) {
    if (s.is_bool()) {
      if (!s.get_bool())
        fail(path, "the schema 'false' accepts no value");
      return json_.any_value();
    }
    if (!s.is_object())
      fail(path, "a schema must be a JSON object or a boolean, got " + std::string(json::to_string(s.kind())));
    const auto& o = s.get_object();
    std::vector<std::string> constraining;
    for (const auto& kv : o) {
      const std::string_view k = kv.key();
      if (annotations.count(k))
        continue;
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
      return g_.choice("null", {grammar::literal("null")});
    if (type == "boolean")
      return g_.choice("boolean", {grammar::literal("true"), grammar::literal("false")});
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
        const std::string wanted = canonical_text(*c);
        std::erase_if(values, [&](const json::value* v) { return canonical_text(*v) != wanted; });
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
      std::string text = canonical_text(*v);
      if (seen.insert(text).second)
        alts.push_back(grammar::literal(text));
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
    if (const auto* p = o.if_contains("pattern")) {
      for (const char* other : {"minLength", "maxLength", "format"})
        if (o.contains(other))
          fail(child(path, other), "'" + std::string(other) + "' alongside 'pattern' is not supported");
      return compile_pattern(*p, child(path, "pattern"));
    }
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
      return json_.any_string();
    const element body = g_.repeat(path + "/chars", {json_.string_char()}, min.value_or(0), max ? *max : -1);
    return g_.choice(path, {{element::byte('"'), body, element::byte('"')}});
  }

  // A string whose decoded value contains a match of the pattern (JSON Schema's search
  // semantics). The strings generated have the match at their start when the pattern begins
  // with '^', at their end when it ends with '$', and anything around it otherwise: a subset
  // of the valid values whenever an anchor sits inside an alternative ("^a|b").
  element compile_pattern(const json::value& p, const std::string& path) {
    if (!p.is_string())
      fail(path, "'pattern' must be a string");
    std::string_view body = p.get_string();
    const bool at_start = body.starts_with('^');
    if (at_start)
      body.remove_prefix(1);
    std::size_t backslashes = 0;
    while (backslashes + 1 < body.size() && body[body.size() - 2 - backslashes] == '\\')
      ++backslashes;
    const bool at_end = body.ends_with('$') && backslashes % 2 == 0;
    if (at_end)
      body.remove_suffix(1);
    const std::string regex = std::string(at_start ? "" : "[\\s\\S]*") + "(?:" + std::string(body) + ")" +
                              (at_end ? "" : "[\\s\\S]*");
    int rule = -1;
    try {
      rule = add_regex(g_, regex, path, regex_text::json_string_body);
    } catch (const invalid_argument_error& e) {
      fail(path, std::string("'pattern' cannot be compiled: ") + e.what());
    }
    return g_.choice(path, {{element::byte('"'), element::ref(rule), element::byte('"')}});
  }

  // Formats with a cheap grammar; nullopt for the rest, which are annotations.
  std::optional<element> compile_format(const std::string& format) {
    if (auto it = formats_.find(format); it != formats_.end())
      return it->second;
    const std::optional<element> out = string_format(g_, format);
    if (out)
      formats_.emplace(format, *out);
    return out;
  }

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

  element compile_integer(const json::object& o, const std::string& path) {
    const int_bounds b = integer_bounds(o, path);
    if (!b.lo && !b.hi)
      return json_.any_integer();
    if (b.lo && b.hi && *b.lo > *b.hi)
      fail(path, "no integer lies between the schema's minimum and maximum");
    return g_.choice(path + "/integer", integer_range(g_, b.lo, b.hi));
  }

  element compile_number(const json::object& o, const std::string& path) {
    const int_bounds b = integer_bounds(o, path);
    if (!b.lo && !b.hi)
      return json_.any_number();
    std::vector<sequence> alts = bounded_decimals(g_, b);
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
        return json_.any_object();
      if (additional->is_bool())
        return g_.choice(path + "/object", {{element::byte('{'), json_.ws(), element::byte('}')}});
      const element value = compile(*additional, child(path, "additionalProperties"));
      const int id = g_.add_rule(path + "/object");
      json_.object_of(id, value, path + "/object");
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
      sequence m = grammar::literal(json::serialize(json::string(kv.key())));
      append(m, {json_.ws(), element::byte(':'), json_.ws(), compile(kv.value(), p)});
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
      sequence with{json_.ws(), element::byte(','), json_.ws()};
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
    alts.push_back({element::byte('{'), json_.ws(), element::ref(first[0]), json_.ws(), element::byte('}')});
    if (required.empty())
      alts.push_back({element::byte('{'), json_.ws(), element::byte('}')});
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
      item = json_.any_value();
    }
    const int k = static_cast<int>(prefix.size());
    const int min = count_keyword(o, "minItems", path).value_or(0);
    int max = count_keyword(o, "maxItems", path).value_or(-1);
    if (!item)
      max = max < 0 ? k : std::min(max, k);
    if (max >= 0 && min > max)
      fail(path, "'minItems' is above 'maxItems' (or the items 'prefixItems' and 'items' allow)");
    const sequence comma{json_.ws(), element::byte(','), json_.ws()};
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
      alts.push_back({element::byte('['), json_.ws(), element::byte(']')});
    if (max != 0)
      alts.push_back({element::byte('['), json_.ws(), at(0), tail(tail, 1), json_.ws(), element::byte(']')});
    return g_.choice(path + "/array", std::move(alts));
  }

  grammar g_;
  json_value_rules json_{g_}; // the shared rules, added to g_ the first time they are used
  const json::value& root_;
  std::map<std::string, int> refs_;
  std::map<std::string, element> formats_;
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