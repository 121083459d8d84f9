// The exceptions troupe throws at a host: a bad configuration, a model that cannot
// be loaded, a request value out of range. runtime/ throws the same types.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace troupe {

// A configuration value that is out of range or unknown; the message names the
// key, the value and what is allowed.
struct config_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A model folder, config.json, safetensors file or tokenizer.json that cannot be used.
struct model_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A request value out of range (temperature < 0, top_p > 1, ...). `param` names
// the field when there is one (OpenAI's error.param), else it is empty.
struct invalid_argument_error : std::invalid_argument {
  explicit invalid_argument_error(const std::string& message, std::string param = {})
      : std::invalid_argument(message), param(std::move(param)) {}
  std::string param;
};

} // namespace troupe
