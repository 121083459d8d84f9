// Rotary embedding frequencies of a model, with its rope scaling applied
// (linear, or Llama-3's wavelength-dependent scaling).
#pragma once

#include <vector>

#include "runtime/model_config.hpp"

namespace troupe::runtime {

// inv_freq[i] for i in [0, head_dim/2): theta^(-2i/head_dim), scaled.
std::vector<float> rope_inv_freq(const model_config& cfg);

} // namespace troupe::runtime
