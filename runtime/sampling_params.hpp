// runtime's name for a request's sampling parameters: the public type of
// troupe/sampling_params.hpp, shared so that what a host sends is what the sampler reads.
#pragma once

#include "runtime/step_batch.hpp"
#include "troupe/sampling_params.hpp"

namespace troupe::runtime {

using troupe::sampling_params;
using troupe::token_bias;

} // namespace troupe::runtime
