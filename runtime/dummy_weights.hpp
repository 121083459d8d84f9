// Weights of a config's shapes without a file (model.load-format=dummy on the
// CPU backend): a draft that disagrees with the target in tests, or a model to
// time where only the shapes matter.
#pragma once

#include <cstdint>

#include "runtime/model_config.hpp"
#include "runtime/model_weights.hpp"

namespace troupe::runtime {

// Matrices normal(0, 0.02) (the usual Llama init scale), norms 1, biases 0,
// from a seed: the same seed gives the same weights.
model_weights dummy_weights(const model_config& cfg, std::uint64_t seed);

} // namespace troupe::runtime
