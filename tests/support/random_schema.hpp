// Seeded random JSON schemas over the subset runtime/structured/json_schema_grammar
// supports: nested objects with required and optional properties, arrays, strings with
// lengths and formats, bounded integers and numbers, enums, const, anyOf, $defs and $ref
// (a recursive definition among them), with annotations sprinkled in.
#pragma once

#include <boost/json.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace troupe::test {

class random_schema {
 public:
  explicit random_schema(std::uint64_t seed) : rng_(seed) {}

  // A new schema; the top level is always an object, as OpenAI's response_format wants.
  boost::json::value next() {
    defs_.clear();
    boost::json::object defs;
    if (chance(0.5)) {
      defs["leaf"] = node(2);
      defs_.push_back("#/$defs/leaf");
    }
    if (chance(0.5)) {
      const std::string name = chance(0.5) ? "tree" : "list";
      defs[name] = recursive(name);
    }
    boost::json::value root = object(0);
    if (!defs.empty() || chance(0.1))
      root.as_object()["$defs"] = std::move(defs);
    if (!extra_defs_.empty()) {
      // Written after the properties that refer to them: order must not matter.
      boost::json::object more;
      for (auto& [name, schema] : extra_defs_)
        more[name] = std::move(schema);
      root.as_object()["definitions"] = std::move(more);
    }
    extra_defs_.clear();
    annotate(root.as_object());
    return root;
  }

 private:
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  int between(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  template <typename T>
  const T& pick(const std::vector<T>& from) {
    return from[static_cast<std::size_t>(between(0, static_cast<int>(from.size()) - 1))];
  }

  void annotate(boost::json::object& o) {
    if (chance(0.2))
      o["description"] = "a value the model writes";
    if (chance(0.1))
      o["title"] = "T";
  }

  // A definition that refers to itself: a tree with optional children, or a linked list
  // that ends in null.
  boost::json::value recursive(const std::string& name) {
    const std::string self = "#/$defs/" + name;
    defs_.push_back(self);
    boost::json::object ref{{"$ref", self}};
    if (name == "tree")
      return {{"type", "object"},
              {"properties",
               {{"value", scalar()}, {"children", {{"type", "array"}, {"items", ref}, {"maxItems", between(1, 3)}}}}},
              {"required", {"value"}},
              {"additionalProperties", false}};
    return {{"type", "object"},
            {"properties", {{"v", {{"type", "integer"}}}, {"next", {{"anyOf", {ref, {{"type", "null"}}}}}}}},
            {"required", {"v", "next"}}};
  }

  boost::json::value node(int depth) {
    if (depth >= 3)
      return scalar();
    switch (between(0, 9)) {
      case 0:
      case 1:
        return object(depth + 1);
      case 2:
      case 3:
        return array(depth + 1);
      case 4: {
        boost::json::array branches;
        for (int i = between(2, 3); i > 0; --i)
          branches.push_back(node(depth + 1));
        return {{chance(0.7) ? "anyOf" : "oneOf", branches}};
      }
      case 5:
        if (!defs_.empty())
          return {{"$ref", pick(defs_)}};
        return scalar();
      case 6:
        if (chance(0.5)) {
          // A definition under "definitions"; its slot is taken before its schema is made,
          // which may add definitions of its own.
          const std::size_t slot = extra_defs_.size();
          const std::string name = "d" + std::to_string(slot);
          extra_defs_.emplace_back(name, nullptr);
          boost::json::value schema = node(depth + 1);
          extra_defs_[slot].second = std::move(schema);
          return {{"$ref", "#/definitions/" + name}};
        }
        return {{"allOf", {node(depth + 1)}}};
      default:
        return scalar();
    }
  }

  boost::json::value object(int depth) {
    static const std::vector<std::string> names = {"id",     "name",   "age", "a b",   "\xc3\xbc", "quote\"d",
                                                   "sl/ash", "til~de", "x",   "items", "type",     "\\back"};
    boost::json::object o{{"type", "object"}};
    if (chance(0.1)) {
      // No properties: any object, {} only, or a map of one schema.
      const int kind = between(0, 2);
      if (kind == 1)
        o["additionalProperties"] = false;
      else if (kind == 2)
        o["additionalProperties"] = depth < 3 ? node(depth) : scalar();
      return o;
    }
    boost::json::object props;
    boost::json::array required;
    std::vector<std::string> pool = names;
    std::shuffle(pool.begin(), pool.end(), rng_);
    for (int i = between(1, 4); i > 0; --i) {
      const std::string& name = pool[static_cast<std::size_t>(i)];
      props[name] = node(depth);
      if (chance(0.6))
        required.push_back(boost::json::string(name));
    }
    o["properties"] = std::move(props);
    if (!required.empty() || chance(0.5))
      o["required"] = std::move(required);
    if (chance(0.5))
      o["additionalProperties"] = false;
    annotate(o);
    return o;
  }

  boost::json::value array(int depth) {
    boost::json::object o{{"type", "array"}};
    int prefix = 0;
    if (chance(0.3)) {
      boost::json::array p;
      prefix = between(1, 2);
      for (int i = 0; i < prefix; ++i)
        p.push_back(node(depth));
      o["prefixItems"] = std::move(p);
      if (chance(0.5))
        o["items"] = false;
      else
        o["items"] = node(depth);
    } else if (chance(0.9)) {
      o["items"] = node(depth);
    }
    const bool closed = o.contains("items") && o["items"].is_bool();
    const int min = between(0, closed ? prefix : 2);
    if (chance(0.5))
      o["minItems"] = min;
    if (chance(0.5))
      o["maxItems"] = closed ? between(min, prefix) : between(min, min + 3);
    return o;
  }

  boost::json::value scalar() {
    switch (between(0, 11)) {
      case 0:
        return {{"type", "string"}};
      case 1: {
        boost::json::object o{{"type", "string"}};
        const int min = between(0, 3);
        if (chance(0.7))
          o["minLength"] = min;
        if (chance(0.7))
          o["maxLength"] = between(min, min + 6);
        return o;
      }
      case 2: {
        static const std::vector<std::string> formats = {"date", "time", "date-time", "uuid", "email", "ipv4", "uri"};
        return {{"type", "string"}, {"format", pick(formats)}};
      }
      case 3: {
        boost::json::object o{{"type", "integer"}};
        const int lo = between(-1000, 1000);
        if (chance(0.6))
          o[chance(0.7) ? "minimum" : "exclusiveMinimum"] = lo;
        if (chance(0.6))
          o[chance(0.7) ? "maximum" : "exclusiveMaximum"] = lo + between(2, 5000);
        return o;
      }
      case 4:
        return {{"type", "integer"}};
      case 5: {
        boost::json::object o{{"type", "number"}};
        if (chance(0.6)) {
          const int lo = between(-50, 50);
          o[chance(0.6) ? "minimum" : "exclusiveMinimum"] = lo;
          if (chance(0.5))
            o[chance(0.6) ? "maximum" : "exclusiveMaximum"] = lo + between(1, 100);
        } else if (chance(0.3)) {
          o[chance(0.5) ? "maximum" : "exclusiveMaximum"] = between(-50, 50);
        }
        return o;
      }
      case 6:
        return {{"type", "boolean"}};
      case 7:
        return {{"type", "null"}};
      case 8: {
        static const std::vector<boost::json::value> values = {"red",
                                                               "gr\"een",
                                                               "\xe2\x82\xac",
                                                               "tab\t",
                                                               0,
                                                               -17,
                                                               2.5,
                                                               -0.125,
                                                               1e21,
                                                               true,
                                                               false,
                                                               nullptr,
                                                               boost::json::array{1, "two"},
                                                               boost::json::object{{"k", "v"}}};
        boost::json::array e;
        for (int i = between(1, 4); i > 0; --i)
          e.push_back(pick(values));
        return {{"enum", e}};
      }
      case 9:
        return {{"const", chance(0.5) ? boost::json::value("fixed") : boost::json::value(42)}};
      case 10:
        return {{"type", {"string", "null"}}, {"maxLength", 5}};
      default:
        return {{"type", "integer"}, {"nullable", true}};
    }
  }

  std::mt19937_64 rng_;
  std::vector<std::string> defs_;
  std::vector<std::pair<std::string, boost::json::value>> extra_defs_;
};

} // namespace troupe::test
