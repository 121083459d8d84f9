// JSON Schema's string formats with a cheap grammar (date, time, date-time, uuid, ipv4,
// email), each as a quoted JSON string.
#pragma once

#include <optional>
#include <string>

#include "runtime/structured/grammar.hpp"

namespace troupe::runtime::structured {

// The rule of a quoted string in `format`, added to `g`; nullopt for the formats without
// one, which are annotations (any string), as JSON Schema 2020-12 treats them by default.
std::optional<element> string_format(grammar& g, const std::string& format);

} // namespace troupe::runtime::structured
