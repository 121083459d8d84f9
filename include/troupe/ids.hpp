// The ids a host sees: a token of the model's vocabulary, and the engine's number
// for a generate request.
#pragma once

#include <cstdint>

namespace troupe {

using token_id = std::int32_t;
using request_id = std::uint64_t;

} // namespace troupe
