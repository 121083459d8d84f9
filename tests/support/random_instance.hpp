// Seeded random JSON values that a schema of tests/support/random_schema.hpp accepts, drawn
// from the schema itself (not from a grammar), so that tests can ask whether a schema's
// grammar derives values it never produced itself.
#pragma once

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace troupe::test {

class random_instance {
 public:
  random_instance(const boost::json::value& root, std::mt19937_64& rng) : root_(root), rng_(rng) {}

  boost::json::value make() { return make(root_, 0); }

 private:
  using value = boost::json::value;

  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  std::int64_t between(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng_);
  }
  template <typename T>
  const T& pick(const std::vector<T>& from) {
    return from[static_cast<std::size_t>(between(0, static_cast<std::int64_t>(from.size()) - 1))];
  }
  // Past this depth, recursion heads for its end: optional parts left out, the fewest items.
  bool deep(int depth) const { return depth > 8; }

  const value& resolve(std::string_view ref) {
    const value* at = &root_;
    std::size_t pos = 1;
    while (pos < ref.size()) {
      std::size_t end = ref.find('/', pos + 1);
      if (end == std::string_view::npos)
        end = ref.size();
      std::string token;
      for (std::size_t i = pos + 1; i < end; ++i)
        token += (ref[i] == '~' && i + 1 < end) ? (ref[++i] == '1' ? '/' : '~') : ref[i];
      at = &at->as_object().at(token);
      pos = end;
    }
    return *at;
  }

  value make(const value& s, int depth) {
    if (s.is_bool())
      return any(depth);
    const auto& o = s.as_object();
    if (const auto* ref = o.if_contains("$ref"))
      return make(resolve(ref->as_string()), depth + 1);
    for (const char* key : {"anyOf", "oneOf"})
      if (const auto* list = o.if_contains(key)) {
        const auto& branches = list->as_array();
        if (deep(depth))
          for (const auto& b : branches)
            if (!b.as_object().contains("$ref"))
              return make(b, depth + 1);
        return make(branches[static_cast<std::size_t>(between(0, static_cast<std::int64_t>(branches.size()) - 1))],
                    depth + 1);
      }
    if (const auto* list = o.if_contains("allOf"))
      return make(list->as_array()[0], depth + 1);
    if (const auto* c = o.if_contains("const"))
      return *c;
    if (const auto* e = o.if_contains("enum"))
      return e->as_array()[static_cast<std::size_t>(between(0, static_cast<std::int64_t>(e->as_array().size()) - 1))];
    std::vector<std::string> types;
    if (const auto* t = o.if_contains("type")) {
      if (t->is_string())
        types.emplace_back(t->as_string());
      else
        for (const auto& x : t->as_array())
          types.emplace_back(x.as_string());
    }
    if (const auto* n = o.if_contains("nullable"); n && n->as_bool())
      types.emplace_back("null");
    if (types.empty())
      return any(depth);
    const std::string type = pick(types);
    if (type == "null")
      return nullptr;
    if (type == "boolean")
      return chance(0.5);
    if (type == "integer")
      return integer(o);
    if (type == "number")
      return number(o);
    if (type == "string")
      return boost::json::string(string(o));
    if (type == "array")
      return array(o, depth);
    return object(o, depth);
  }

  value any(int depth) {
    switch (between(0, deep(depth) ? 3 : 5)) {
      case 0:
        return nullptr;
      case 1:
        return between(-1000, 1000);
      case 2:
        return boost::json::string(text(between(0, 4)));
      case 3:
        return between(-100, 100) / 4.0;
      case 4: {
        boost::json::array a;
        for (auto i = between(0, 2); i > 0; --i)
          a.push_back(any(depth + 1));
        return a;
      }
      default: {
        boost::json::object out;
        for (auto i = between(0, 2); i > 0; --i)
          out[text(between(0, 3))] = any(depth + 1);
        return out;
      }
    }
  }

  // Characters that need escaping, ASCII, and 2-, 3- and 4-byte UTF-8.
  std::string text(std::int64_t length) {
    static const std::vector<std::string> chars = {
        "a", "Z", " ", "\"", "\\", "/", "\n", "\x01", "\x7f", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "9"};
    std::string out;
    for (std::int64_t i = 0; i < length; ++i)
      out += pick(chars);
    return out;
  }

  std::string digits(int n) {
    std::string out;
    for (int i = 0; i < n; ++i)
      out += static_cast<char>('0' + between(0, 9));
    return out;
  }

  std::string two(std::int64_t lo, std::int64_t hi) {
    const auto v = between(lo, hi);
    return std::string(1, static_cast<char>('0' + v / 10)) + static_cast<char>('0' + v % 10);
  }

  std::string date() {
    static constexpr int days[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    const auto month = between(1, 12);
    return digits(4) + "-" + two(month, month) + "-" + two(1, days[month - 1]);
  }

  std::string time() {
    std::string out = two(0, 23) + ":" + two(0, 59) + ":" + two(0, 59);
    if (chance(0.5))
      out += "." + digits(static_cast<int>(between(1, 6)));
    if (chance(0.5))
      return out + "Z";
    return out + (chance(0.5) ? "+" : "-") + two(0, 23) + ":" + two(0, 59);
  }

  std::string string(const boost::json::object& o) {
    const std::string format = o.contains("format") ? std::string(o.at("format").as_string()) : "";
    if (format == "date")
      return date();
    if (format == "time")
      return time();
    if (format == "date-time")
      return date() + "T" + time();
    if (format == "uuid") {
      std::string out;
      static const std::string hex = "0123456789abcdefABCDEF";
      for (int i = 0; i < 36; ++i)
        out += (i == 8 || i == 13 || i == 18 || i == 23) ? '-' : hex[static_cast<std::size_t>(between(0, 21))];
      return out;
    }
    if (format == "ipv4")
      return std::to_string(between(0, 255)) + "." + std::to_string(between(0, 255)) + "." +
             std::to_string(between(0, 255)) + "." + std::to_string(between(0, 255));
    if (format == "email") {
      static const std::vector<std::string> locals = {"a", "first.last", "x_y+z%1", "A-b.c"};
      static const std::vector<std::string> domains = {"b.co", "mail.example-host.org", "x1.y2.z3", "a--b.c"};
      return pick(locals) + "@" + pick(domains);
    }
    const std::int64_t min = o.contains("minLength") ? o.at("minLength").to_number<std::int64_t>() : 0;
    const std::int64_t max = o.contains("maxLength") ? o.at("maxLength").to_number<std::int64_t>() : min + 6;
    return text(between(min, max));
  }

  value integer(const boost::json::object& o) {
    std::int64_t lo = -1'000'000, hi = 1'000'000;
    bool bounded = false;
    if (const auto* v = o.if_contains("minimum"))
      lo = v->to_number<std::int64_t>(), bounded = true;
    if (const auto* v = o.if_contains("exclusiveMinimum"))
      lo = v->to_number<std::int64_t>() + 1, bounded = true;
    if (const auto* v = o.if_contains("maximum"))
      hi = v->to_number<std::int64_t>(), bounded = true;
    if (const auto* v = o.if_contains("exclusiveMaximum"))
      hi = v->to_number<std::int64_t>() - 1, bounded = true;
    if (!bounded && chance(0.2))
      return between(INT64_MIN, INT64_MAX);
    if (chance(0.3))
      return chance(0.5) ? lo : hi; // the bounds themselves
    return between(lo, hi);
  }

  value number(const boost::json::object& o) {
    const bool any_bound = o.contains("minimum") || o.contains("exclusiveMinimum") || o.contains("maximum") ||
                           o.contains("exclusiveMaximum");
    if (!any_bound) {
      switch (between(0, 3)) {
        case 0:
          return between(-1000, 1000);
        case 1:
          return between(-1000, 1000) / 8.0;
        case 2:
          return static_cast<double>(between(1, 99999)) * std::pow(10.0, static_cast<double>(between(-12, 25)));
        default:
          return -static_cast<double>(between(1, 999)) / 1e7;
      }
    }
    // Schema bounds are integers: integers inside, or k + a fraction with k, k + 1 inside
    // the closed range.
    std::int64_t edge_lo = -1000, edge_hi = 1000;
    if (const auto* v = o.if_contains("minimum"))
      edge_lo = v->to_number<std::int64_t>();
    if (const auto* v = o.if_contains("exclusiveMinimum"))
      edge_lo = v->to_number<std::int64_t>();
    if (const auto* v = o.if_contains("maximum"))
      edge_hi = v->to_number<std::int64_t>();
    if (const auto* v = o.if_contains("exclusiveMaximum"))
      edge_hi = v->to_number<std::int64_t>();
    if (!o.contains("minimum") && !o.contains("exclusiveMinimum"))
      edge_lo = edge_hi - 1000;
    if (!o.contains("maximum") && !o.contains("exclusiveMaximum"))
      edge_hi = edge_lo + 1000;
    const std::int64_t lo = edge_lo + (o.contains("exclusiveMinimum") ? 1 : 0);
    const std::int64_t hi = edge_hi - (o.contains("exclusiveMaximum") ? 1 : 0);
    if ((chance(0.4) || edge_hi - edge_lo < 1) && lo <= hi)
      return between(lo, hi);
    static const std::vector<double> fractions = {0.5, 0.25, 0.125, 0.875, 0.001};
    return static_cast<double>(between(edge_lo, edge_hi - 1)) + pick(fractions);
  }

  value array(const boost::json::object& o, int depth) {
    std::vector<const value*> prefix;
    if (const auto* p = o.if_contains("prefixItems"))
      for (const auto& x : p->as_array())
        prefix.push_back(&x);
    const value* items = o.if_contains("items");
    const bool closed = items && items->is_bool() && !items->as_bool();
    const std::int64_t min = o.contains("minItems") ? o.at("minItems").to_number<std::int64_t>() : 0;
    std::int64_t max = o.contains("maxItems") ? o.at("maxItems").to_number<std::int64_t>() : min + 3;
    if (closed)
      max = std::min<std::int64_t>(max, static_cast<std::int64_t>(prefix.size()));
    const std::int64_t n = deep(depth) ? min : between(min, max);
    boost::json::array out;
    for (std::int64_t i = 0; i < n; ++i) {
      const auto at = static_cast<std::size_t>(i);
      out.push_back(at < prefix.size() ? make(*prefix[at], depth + 1)
                    : items            ? make(*items, depth + 1)
                                       : any(depth + 1));
    }
    return out;
  }

  value object(const boost::json::object& o, int depth) {
    const auto* props = o.if_contains("properties");
    const auto* additional = o.if_contains("additionalProperties");
    boost::json::object out;
    if (!props || props->as_object().empty()) {
      if (additional && additional->is_bool() && !additional->as_bool())
        return out;
      for (auto i = deep(depth) ? 0 : between(0, 3); i > 0; --i)
        out[text(between(0, 3))] =
            additional && additional->is_object() ? make(*additional, depth + 1) : any(depth + 1);
      return out;
    }
    std::vector<std::string> required;
    if (const auto* r = o.if_contains("required"))
      for (const auto& x : r->as_array())
        required.emplace_back(x.as_string());
    for (const auto& kv : props->as_object()) {
      const bool needed = std::find(required.begin(), required.end(), std::string(kv.key())) != required.end();
      if (needed || (!deep(depth) && chance(0.5)))
        out[kv.key()] = make(kv.value(), depth + 1);
    }
    return out;
  }

  const value& root_;
  std::mt19937_64& rng_;
};

} // namespace troupe::test
