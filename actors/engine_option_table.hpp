// The one table of the engine's options: each key of [model], [engine], [speculative] and
// [debug] declared once, with its field, its documentation and the rule its value obeys.
// Registration (add_engine_options), reading (engine_config_from), strict checking
// (check_settings), validation (validate) and the documented INI (engine_ini) all walk it.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "troupe/engine_config.hpp"

namespace troupe::actors {

// The engine_config member an option fills.
using option_field =
    std::variant<std::string engine_config::*, int engine_config::*, double engine_config::*, bool engine_config::*>;

// What a value must be. A string option with choices takes one of them; a number lies in
// [min, max]; `holds` is a rule no range says (a power of two, a key that needs another).
// `allowed` says all of it in words, for the error message.
struct option_rule {
  std::span<const std::string_view> choices = {};
  double min = -1e300, max = 1e300;
  bool (*holds)(const engine_config&) = nullptr;
  const char* allowed = nullptr; // null: the choices, comma-separated
};

struct engine_option {
  const char* category; // model | engine | speculative | debug
  const char* key;      // as written in the INI file: block-size
  option_field field;
  const char* doc; // --long-help and the INI file's comment above the key
  option_rule rule;
};

// Every option, in the order of the INI file.
std::span<const engine_option> engine_options();

// The comment the INI file prints above a category (empty: none).
std::string_view category_doc(std::string_view category);

// "engine.block-size".
std::string qualified_name(const engine_option& option);

// The option's value in `cfg` as an INI file writes it ("fcfs" quoted, 0.25, true).
std::string ini_value(const engine_option& option, const engine_config& cfg);

} // namespace troupe::actors
