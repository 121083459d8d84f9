// A sequence a step could not go on with while the step itself went well (a structured-output
// constraint too ambiguous to follow): it alone fails, with this message. step_sampler records
// them; the executor sends the step's failures back in its step_result.
#pragma once

#include <cstdint>
#include <string>

namespace troupe::runtime {

struct sequence_failure {
  std::uint64_t id = 0; // the seq_id
  std::string message;
};

} // namespace troupe::runtime
