// Typed exceptions thrown at runtime/'s edges (files, configs, user input); the
// apps and actors turn them into clear messages. Never thrown on the hot path.
// They are the public types of troupe/errors.hpp, which hosts catch.
#pragma once

#include "troupe/errors.hpp"

namespace troupe::runtime {

using troupe::invalid_argument_error; // a request parameter out of range (temperature < 0, top_p > 1, ...)
using troupe::model_error; // a model folder, config.json, safetensors file or tokenizer.json that cannot be used

} // namespace troupe::runtime
