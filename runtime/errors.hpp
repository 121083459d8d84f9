// Typed exceptions thrown at runtime/'s edges (files, configs, user input); the
// apps and actors turn them into clear messages. Never thrown on the hot path.
#pragma once

#include <stdexcept>
#include <string>

namespace troupe::runtime {

// A model folder, config.json, safetensors file or tokenizer.json that cannot be used.
struct model_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A request parameter out of range (temperature < 0, top_p > 1, ...).
struct invalid_argument_error : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

} // namespace troupe::runtime
