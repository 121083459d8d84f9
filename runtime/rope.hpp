// Rotary embedding frequencies of a model, with its rope scaling applied
// (linear, or Llama-3's wavelength-dependent scaling).
#pragma once

#include <vector>

#include "runtime/model_config.hpp"

namespace troupe::runtime {

// inv_freq[i] for i in [0, head_dim/2): theta^(-2i/head_dim), scaled. With sliding_rope (for the layers where
// cfg.uses_sliding_rope), the sliding layers' rotation: theta = cfg.sliding_rope_theta, unscaled.
std::vector<float> rope_inv_freq(const model_config& cfg, bool sliding_rope = false);

} // namespace troupe::runtime
