// Weights of a config's shapes without a file (model.load-format=dummy on the
// CPU backend): a draft that disagrees with the target in tests, or a model to
// time where only the shapes matter.
#pragma once

#include <cstdint>

#include "runtime/model_config.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/shard_shape.hpp"

namespace troupe::runtime {

// Matrices normal(0, 0.02) (the usual Llama init scale), norms 1, biases 0,
// from a seed: the same seed gives the same weights.
model_weights dummy_weights(const model_config& cfg, std::uint64_t seed);

// Rank shard.rank's share of dummy_weights(cfg, seed): equal, bit for bit, to
// shard_weights(dummy_weights(cfg, seed), cfg, shard), without the whole model ever being in
// memory (embeddings and norms are whole in every rank anyway).
model_weights dummy_weight_shard(const model_config& cfg, std::uint64_t seed, const shard_shape& shard);

} // namespace troupe::runtime
