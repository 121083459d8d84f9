// A small JSON Schema validator for exactly the subset runtime/structured/json_schema_grammar
// supports, written apart from it (no shared code), so that tests can check the grammar's
// output against an independent reading of the schema.
//
// The subset's own decisions, as the compiler documents them: additionalProperties absent
// alongside properties closes the object; oneOf is read as anyOf; formats date, time,
// date-time, uuid, ipv4 and email are checked with the same simplified rules (February 29
// in any year, time offsets required, 1 to 6 fraction digits, dot-atom emails), others are
// annotations; pattern and other keywords are not known here (the schemas tested never
// carry them).
#pragma once

#include <boost/json.hpp>

#include "tests/support/pcre_full_match.hpp"

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

namespace troupe::test {

namespace json_schema_validator_detail {

namespace json = boost::json;

inline bool number_equal(const json::value& a, const json::value& b) {
  if (a.is_int64() && b.is_int64())
    return a.get_int64() == b.get_int64();
  if (a.is_uint64() && b.is_uint64())
    return a.get_uint64() == b.get_uint64();
  return a.to_number<double>() == b.to_number<double>();
}

// JSON equality with numbers compared by value (1 == 1.0), as JSON Schema's enum does.
inline bool same(const json::value& a, const json::value& b) {
  if (a.is_number() && b.is_number())
    return number_equal(a, b);
  if (a.kind() != b.kind())
    return false;
  if (a.is_array()) {
    const auto &x = a.get_array(), &y = b.get_array();
    if (x.size() != y.size())
      return false;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (!same(x[i], y[i]))
        return false;
    return true;
  }
  if (a.is_object()) {
    const auto &x = a.get_object(), &y = b.get_object();
    if (x.size() != y.size())
      return false;
    for (const auto& kv : x) {
      const auto* other = y.if_contains(kv.key());
      if (!other || !same(kv.value(), *other))
        return false;
    }
    return true;
  }
  return a == b;
}

inline bool integral(const json::value& v) {
  if (v.is_int64() || v.is_uint64())
    return true;
  return v.is_double() && std::isfinite(v.get_double()) && std::floor(v.get_double()) == v.get_double();
}

inline bool is_type(const json::value& v, std::string_view t) {
  if (t == "integer")
    return integral(v);
  if (t == "number")
    return v.is_number();
  if (t == "string")
    return v.is_string();
  if (t == "boolean")
    return v.is_bool();
  if (t == "null")
    return v.is_null();
  if (t == "object")
    return v.is_object();
  if (t == "array")
    return v.is_array();
  return false;
}

// Code points of valid UTF-8 (boost::json only yields valid UTF-8).
inline std::size_t code_points(std::string_view s) {
  std::size_t n = 0;
  for (const char c : s)
    n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

inline bool digits(std::string_view s, std::size_t at, std::size_t n) {
  if (at + n > s.size())
    return false;
  for (std::size_t i = at; i < at + n; ++i)
    if (s[i] < '0' || s[i] > '9')
      return false;
  return true;
}

inline int two(std::string_view s, std::size_t at) {
  return (s[at] - '0') * 10 + (s[at + 1] - '0');
}

inline bool valid_date(std::string_view s) {
  if (s.size() != 10 || !digits(s, 0, 4) || s[4] != '-' || !digits(s, 5, 2) || s[7] != '-' || !digits(s, 8, 2))
    return false;
  const int month = two(s, 5), day = two(s, 8);
  static constexpr int days[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month >= 1 && month <= 12 && day >= 1 && day <= days[month - 1];
}

inline bool valid_time(std::string_view s) {
  if (s.size() < 9 || !digits(s, 0, 2) || s[2] != ':' || !digits(s, 3, 2) || s[5] != ':' || !digits(s, 6, 2))
    return false;
  if (two(s, 0) > 23 || two(s, 3) > 59 || two(s, 6) > 59)
    return false;
  std::size_t i = 8;
  if (s[i] == '.') {
    std::size_t n = 0;
    while (i + 1 + n < s.size() && s[i + 1 + n] >= '0' && s[i + 1 + n] <= '9')
      ++n;
    if (n < 1 || n > 6)
      return false;
    i += 1 + n;
  }
  const std::string_view zone = s.substr(i);
  if (zone == "Z")
    return true;
  return zone.size() == 6 && (zone[0] == '+' || zone[0] == '-') && digits(zone, 1, 2) && zone[3] == ':' &&
         digits(zone, 4, 2) && two(zone, 1) <= 23 && two(zone, 4) <= 59;
}

inline bool valid_uuid(std::string_view s) {
  if (s.size() != 36)
    return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-')
        return false;
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) {
      return false;
    }
  }
  return true;
}

inline bool valid_ipv4(std::string_view s) {
  int parts = 0;
  std::size_t i = 0;
  while (true) {
    std::size_t n = 0;
    while (i + n < s.size() && s[i + n] >= '0' && s[i + n] <= '9')
      ++n;
    if (n < 1 || n > 3 || (n > 1 && s[i] == '0') || std::stoi(std::string(s.substr(i, n))) > 255)
      return false;
    ++parts;
    i += n;
    if (i == s.size())
      return parts == 4;
    if (s[i] != '.' || parts == 4)
      return false;
    ++i;
  }
}

inline bool valid_email(std::string_view s) {
  const auto at = s.find('@');
  if (at == std::string_view::npos)
    return false;
  const std::string_view local = s.substr(0, at), domain = s.substr(at + 1);
  auto atom_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '%' ||
           c == '+' || c == '-';
  };
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); };
  // Parts split by '.', none empty; each part checked by `ok`.
  auto dotted = [](std::string_view text, auto ok, int min_parts) {
    int parts = 0;
    std::size_t start = 0;
    while (true) {
      const auto dot = text.find('.', start);
      const auto part = text.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
      if (part.empty() || !ok(part))
        return false;
      ++parts;
      if (dot == std::string_view::npos)
        return parts >= min_parts;
      start = dot + 1;
    }
  };
  const bool local_ok = dotted(
      local,
      [&](std::string_view p) {
        for (const char c : p)
          if (!atom_char(c))
            return false;
        return true;
      },
      1);
  const bool domain_ok = dotted(
      domain,
      [&](std::string_view p) {
        if (!alnum(p.front()) || !alnum(p.back()))
          return false;
        for (const char c : p)
          if (!alnum(c) && c != '-')
            return false;
        return true;
      },
      2);
  return local_ok && domain_ok;
}

class validator {
 public:
  explicit validator(const json::value& root) : root_(root) {}

  bool check(const json::value& s, const json::value& v, std::string& why, const std::string& at) {
    if (s.is_bool()) {
      if (!s.get_bool())
        why = at + ": schema false";
      return s.get_bool();
    }
    const auto& o = s.get_object();
    if (const auto* ref = o.if_contains("$ref"))
      return check(resolve(ref->get_string()), v, why, at);
    if (const auto* list = o.if_contains("anyOf"))
      return any(list->get_array(), v, why, at);
    if (const auto* list = o.if_contains("oneOf"))
      return any(list->get_array(), v, why, at);
    if (const auto* list = o.if_contains("allOf")) {
      for (const auto& sub : list->get_array())
        if (!check(sub, v, why, at))
          return false;
      return true;
    }
    if (const auto* e = o.if_contains("enum")) {
      bool found = false;
      for (const auto& x : e->get_array())
        found = found || same(x, v);
      if (!found)
        return fail(why, at, "not in enum");
    }
    if (const auto* c = o.if_contains("const"); c && !same(*c, v))
      return fail(why, at, "not the const");
    if (const auto* t = o.if_contains("type")) {
      bool ok = false;
      if (t->is_string())
        ok = is_type(v, t->get_string());
      else
        for (const auto& x : t->get_array())
          ok = ok || is_type(v, x.get_string());
      if (const auto* n = o.if_contains("nullable"); n && n->get_bool() && v.is_null())
        ok = true;
      if (!ok)
        return fail(why, at, "wrong type " + std::string(json::to_string(v.kind())));
    }
    if (v.is_string())
      return check_string(o, v.get_string(), why, at);
    if (v.is_number())
      return check_number(o, v, why, at);
    if (v.is_object())
      return check_object(o, v.get_object(), why, at);
    if (v.is_array())
      return check_array(o, v.get_array(), why, at);
    return true;
  }

 private:
  static bool fail(std::string& why, const std::string& at, const std::string& what) {
    why = (at.empty() ? std::string("(root)") : at) + ": " + what;
    return false;
  }

  const json::value& resolve(std::string_view ref) {
    const json::value* cur = &root_;
    std::size_t pos = 1; // after '#'
    while (pos < ref.size()) {
      auto end = ref.find('/', pos + 1);
      if (end == std::string_view::npos)
        end = ref.size();
      std::string token;
      for (std::size_t i = pos + 1; i < end; ++i)
        if (ref[i] == '~' && i + 1 < end)
          token += ref[++i] == '1' ? '/' : '~';
        else
          token += ref[i];
      cur = cur->is_object() ? &cur->get_object().at(token) : &cur->get_array().at(std::stoul(token));
      pos = end;
    }
    return *cur;
  }

  bool any(const json::array& list, const json::value& v, std::string& why, const std::string& at) {
    std::string all;
    for (const auto& sub : list) {
      std::string w;
      if (check(sub, v, w, at))
        return true;
      all += "[" + w + "]";
    }
    return fail(why, at, "no branch of anyOf/oneOf matches: " + all);
  }

  bool check_string(const json::object& o, json::string_view s, std::string& why, const std::string& at) {
    const std::size_t n = code_points(s);
    if (const auto* m = o.if_contains("minLength"); m && n < m->to_number<std::uint64_t>())
      return fail(why, at, "shorter than minLength");
    if (const auto* m = o.if_contains("maxLength"); m && n > m->to_number<std::uint64_t>())
      return fail(why, at, "longer than maxLength");
    if (const auto* p = o.if_contains("pattern");
        p && !pcre_search(std::string(p->get_string()), std::string(s.data(), s.size())))
      return fail(why, at, "does not match pattern " + std::string(p->get_string()));
    if (const auto* f = o.if_contains("format")) {
      const std::string_view format = f->get_string();
      const std::string_view text(s.data(), s.size());
      bool ok = true;
      if (format == "date")
        ok = valid_date(text);
      else if (format == "time")
        ok = valid_time(text);
      else if (format == "date-time")
        ok = text.size() > 11 && valid_date(text.substr(0, 10)) && text[10] == 'T' && valid_time(text.substr(11));
      else if (format == "uuid")
        ok = valid_uuid(text);
      else if (format == "ipv4")
        ok = valid_ipv4(text);
      else if (format == "email")
        ok = valid_email(text);
      if (!ok)
        return fail(why, at, "not a " + std::string(format));
    }
    return true;
  }

  bool check_number(const json::object& o, const json::value& v, std::string& why, const std::string& at) {
    const double x = v.to_number<double>();
    if (const auto* m = o.if_contains("minimum"); m && x < m->to_number<double>())
      return fail(why, at, "below minimum");
    if (const auto* m = o.if_contains("maximum"); m && x > m->to_number<double>())
      return fail(why, at, "above maximum");
    if (const auto* m = o.if_contains("exclusiveMinimum"); m && x <= m->to_number<double>())
      return fail(why, at, "not above exclusiveMinimum");
    if (const auto* m = o.if_contains("exclusiveMaximum"); m && x >= m->to_number<double>())
      return fail(why, at, "not below exclusiveMaximum");
    return true;
  }

  bool check_object(const json::object& o, const json::object& v, std::string& why, const std::string& at) {
    static const json::object none;
    const auto* p = o.if_contains("properties");
    const json::object& props = p ? p->get_object() : none;
    if (const auto* r = o.if_contains("required"))
      for (const auto& name : r->get_array())
        if (!v.contains(name.get_string()))
          return fail(why, at, "missing required '" + std::string(name.get_string()) + "'");
    const auto* additional = o.if_contains("additionalProperties");
    for (const auto& kv : v) {
      const std::string here = at + "/" + std::string(kv.key());
      if (const auto* sub = props.if_contains(kv.key())) {
        if (!check(*sub, kv.value(), why, here))
          return false;
      } else if (additional
                     ? (additional->is_bool() ? !additional->get_bool() : !check(*additional, kv.value(), why, here))
                     : !props.empty()) {
        if (why.empty() || additional == nullptr || additional->is_bool())
          why = here + ": property not allowed";
        return false;
      }
    }
    return true;
  }

  bool check_array(const json::object& o, const json::array& v, std::string& why, const std::string& at) {
    if (const auto* m = o.if_contains("minItems"); m && v.size() < m->to_number<std::uint64_t>())
      return fail(why, at, "fewer than minItems");
    if (const auto* m = o.if_contains("maxItems"); m && v.size() > m->to_number<std::uint64_t>())
      return fail(why, at, "more than maxItems");
    std::size_t k = 0;
    if (const auto* p = o.if_contains("prefixItems")) {
      const auto& prefix = p->get_array();
      for (; k < prefix.size() && k < v.size(); ++k)
        if (!check(prefix[k], v[k], why, at + "/" + std::to_string(k)))
          return false;
    }
    const auto* items = o.if_contains("items");
    for (std::size_t i = k; i < v.size(); ++i)
      if (items && !check(*items, v[i], why, at + "/" + std::to_string(i)))
        return false;
    return true;
  }

  const json::value& root_;
};

} // namespace json_schema_validator_detail

// Does `instance` satisfy `schema` (read as the supported subset)? When not, `why` (if
// given) says where and what.
inline bool validates(const boost::json::value& schema, const boost::json::value& instance, std::string* why) {
  std::string reason;
  json_schema_validator_detail::validator v(schema);
  const bool ok = v.check(schema, instance, reason, "");
  if (why)
    *why = reason;
  return ok;
}

} // namespace troupe::test
