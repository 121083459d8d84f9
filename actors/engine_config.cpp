// The engine's INI/command-line options, each declared once in actors/engine_option_table:
// registration, reading from a parsed config, strict checking, validation with messages that
// name key, value and what is allowed, and the documented INI text.
#include <caf/config_option_adder.hpp>
#include <caf/config_value.hpp>
#include <caf/settings.hpp>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string_view>
#include <variant>

#include "actors/engine_option_table.hpp"
#include "troupe/engine.hpp"

namespace troupe {

namespace {
caf::string_view caf_view(const char* text) {
  return {text, std::strlen(text)};
}
} // namespace

void add_engine_options(caf::config_option_set& options, engine_config& cfg) {
  for (const auto& option : actors::engine_options())
    std::visit(
        [&](auto member) {
          caf::config_option_adder{options, caf_view(option.category)}.add(cfg.*member, caf_view(option.key),
                                                                           caf_view(option.doc));
        },
        option.field);
}

engine_config engine_config_from(const caf::actor_system_config& sys_cfg) {
  engine_config cfg;
  for (const auto& option : actors::engine_options())
    std::visit(
        [&](auto member) {
          using T = std::decay_t<decltype(cfg.*member)>;
          if (auto value = caf::get_if<T>(&sys_cfg.content, actors::qualified_name(option)))
            cfg.*member = *value;
        },
        option.field);
  return cfg;
}

std::string engine_ini() {
  std::string out;
  std::string_view category;
  for (const auto& option : actors::engine_options()) {
    if (category != option.category) {
      if (!category.empty())
        out += "\n";
      category = option.category;
      if (auto doc = actors::category_doc(category); !doc.empty())
        out += "; " + std::string(doc) + "\n";
      out += "[" + std::string(category) + "]\n";
    }
    out += "; " + std::string(option.doc) + "\n" + option.key + "=" + actors::ini_value(option, engine_config{}) + "\n";
  }
  return out;
}

namespace {
template <class T>
[[noreturn]] void reject(const std::string& key, const T& value, const std::string& allowed) {
  std::ostringstream out;
  out << "invalid value for " << key << ": '" << std::boolalpha << value << "' (allowed: " << allowed << ")";
  throw config_error(out.str());
}

std::string joined(std::span<const std::string_view> choices) {
  std::string list;
  for (auto choice : choices)
    list += (list.empty() ? "" : ", ") + std::string(choice);
  return list;
}

std::string_view view(caf::string_view s) {
  return {s.data(), s.size()};
}

// What a declared option's type accepts, in words (CAF's type names are terse).
std::string allowed_for(std::string_view type_name) {
  if (type_name == "int32")
    return "an integer";
  if (type_name == "real64")
    return "a number";
  if (type_name == "boolean")
    return "true or false";
  if (type_name == "string")
    return "a string (quoted in an INI file)";
  return std::string(type_name);
}

// A value as it would be written in an INI file (CAF prints 0.5 as 0.500000).
std::string written(const caf::config_value& v) {
  if (auto real = caf::get_if<caf::config_value::real>(&v)) {
    std::ostringstream out;
    out << *real;
    return out.str();
  }
  return caf::to_string(v);
}

const char* type_of(const caf::config_value& v) {
  if (caf::holds_alternative<caf::config_value::integer>(v))
    return "an integer";
  if (caf::holds_alternative<caf::config_value::real>(v))
    return "a number";
  if (caf::holds_alternative<bool>(v))
    return "a boolean";
  if (caf::holds_alternative<std::string>(v))
    return "a string";
  if (caf::holds_alternative<caf::config_value::list>(v))
    return "a list";
  if (caf::holds_alternative<caf::config_value::dictionary>(v))
    return "a category";
  return "a value of another type";
}
} // namespace

void check_settings(const caf::settings& content) {
  // The declared options are the one list of known keys and their types.
  engine_config scratch;
  caf::config_option_set options;
  add_engine_options(options, scratch);
  for (const char* category : engine_categories) {
    const caf::string_view cat(category, std::strlen(category));
    auto entry = content.find(cat);
    if (entry == content.end())
      continue;
    auto keys = caf::get_if<caf::settings>(&entry->second);
    if (keys == nullptr)
      throw config_error(std::string(category) + " must be a category ([" + category + "] in an INI file), not " +
                         caf::to_string(entry->second));
    for (const auto& [key, value] : *keys) {
      const std::string name = std::string(category) + "." + key;
      auto opt = options.qualified_name_lookup(cat, key);
      if (opt == nullptr) {
        std::string known;
        for (const auto& o : options)
          if (view(o.category()) == category)
            known += (known.empty() ? "" : ", ") + std::string(view(o.long_name()));
        throw config_error("unknown key " + name + " = " + written(value) + " (known keys of [" + category +
                           "]: " + known + ")");
      }
      // An integer is a fine value for a floating-point key (gpu-memory-utilization=1).
      if (view(opt->type_name()) == "real64" && caf::holds_alternative<caf::config_value::integer>(value))
        continue;
      if (opt->check(value)) {
        const bool integer = caf::holds_alternative<caf::config_value::integer>(value);
        throw config_error("invalid value for " + name + ": " + written(value) + " is " + type_of(value) +
                           (integer && view(opt->type_name()) == "int32" ? " out of range" : "") +
                           " (allowed: " + allowed_for(view(opt->type_name())) + ")");
      }
    }
  }
}

void validate(const engine_config& cfg) {
  for (const auto& option : actors::engine_options()) {
    const auto name = actors::qualified_name(option);
    const auto& rule = option.rule;
    const std::string allowed = rule.allowed ? rule.allowed : joined(rule.choices);
    std::visit(
        [&](auto member) {
          const auto& value = cfg.*member;
          using T = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<T, std::string>) {
            if (!rule.choices.empty() &&
                std::find(rule.choices.begin(), rule.choices.end(), value) == rule.choices.end())
              reject(name, value, allowed);
          } else if constexpr (!std::is_same_v<T, bool>) {
            if (!(value >= rule.min && value <= rule.max)) // NaN too
              reject(name, value, allowed);
          }
          if (rule.holds && !rule.holds(cfg))
            reject(name, value, allowed);
        },
        option.field);
  }
}

} // namespace troupe
