// A tensor-parallel rank's weights: the slices of a model's tensors that its shard_shape
// names, in the layout the runner computes with. Every rank's partial results add up to
// (row-parallel) or line up into (column-parallel) those of the whole model.
#pragma once

#include "runtime/model_config.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/shard_shape.hpp"

namespace troupe::runtime {

// Rank shard.rank's share of `full`, a model of `model`'s shapes (a rank that must not hold the
// whole model reads the same slices straight from its source: load_model_weight_shard,
// dummy_weight_shard):
//   q_proj, q_bias         rows of the query heads [q_heads * head_dim, hidden]
//   k_proj, v_proj, biases rows of the kv heads    [kv_heads * head_dim, hidden]
//   o_proj                 columns of the query heads [hidden, q_heads * head_dim]
//   gate_proj, up_proj     rows [intermediate_begin, + intermediate)   [intermediate, hidden]
//   down_proj              the same columns                           [hidden, intermediate]
//   lm_head                rows [vocab_begin, + vocab) of the output projection, also when
//                          tied (then embed_tokens stays whole and lm_head holds the slice)
//   embed_tokens, norms    whole (q_norm and k_norm too: one vector for every head)
//   experts_gate_up        per expert, rows [expert_intermediate_begin, + expert_intermediate) of its gate and
//                          of its up                               [experts, 2 * expert_intermediate, hidden]
//   experts_down           per expert, the same columns            [experts, hidden, expert_intermediate]
//   router,                whole: every rank routes every token the same way
//   shared_expert_gate     (the shared expert itself is gate_proj, up_proj and down_proj)
// Throws std::invalid_argument naming the tensor when `full` does not have model's shapes.
model_weights shard_weights(const model_weights& full, const model_config& model, const shard_shape& shard);

// Throws std::invalid_argument naming the first tensor whose size is not the one shard_weights
// gives for `shard` (for the whole model: shard_shapes(model, 1)[0]).
void check_shard_weights(const model_weights& weights, const model_config& model, const shard_shape& shard);

} // namespace troupe::runtime
