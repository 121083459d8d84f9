// How a model is shared out among the ranks of a tensor-parallel group, Megatron-style:
// the numbers each rank's part of every layer has, and the widths that cannot be served.
// Plain arithmetic on model_config: the engine plan and the weight sharding both use it.
#pragma once

#include <vector>

#include "runtime/model_config.hpp"

namespace troupe::runtime {

// One rank's share of every layer. Column-parallel layers (q, k, v, gate, up, the LM head)
// keep a contiguous range of their output rows; row-parallel ones (o_proj, down_proj) keep
// the matching range of input columns, so a rank's partial results add up to the whole.
// Embeddings and norms are not sharded: every rank holds them whole.
struct shard_shape {
  int rank = 0, ranks = 1;
  // Query heads: q's rows and o_proj's columns [q_head_begin * head_dim, + q_heads * head_dim).
  int q_head_begin = 0, q_heads = 0;
  // Key/value heads (k's and v's rows, the KV pool's heads). With at least as many kv heads
  // as ranks, the ranks split them; with fewer, each rank keeps a copy of the one kv head
  // its query heads read.
  int kv_head_begin = 0, kv_heads = 0;
  // The MLP's hidden units: gate's and up's rows, down_proj's columns (on a mixture-of-experts model the
  // shared expert's, or none).
  int intermediate_begin = 0, intermediate = 0;
  // A mixture-of-experts model's (model_config::moe; else 0): the rows of every expert's gate and up,
  // and its down's columns, that this rank keeps. Each rank holds a slice of every expert, so
  // routing is the same on every rank and the partial sums add up like the dense MLP's.
  int expert_intermediate_begin = 0, expert_intermediate = 0;
  // The LM head's rows: [rank * V / ranks, (rank + 1) * V / ranks) in integer arithmetic, so
  // any vocabulary splits, the slices differing by at most one row.
  int vocab_begin = 0, vocab = 0;

  bool operator==(const shard_shape&) const = default;
};

// Every rank's shape, rank 0 first. One rank gets the whole model. Throws config_error naming
// the width and the model's numbers when the query heads, the intermediate size (the experts' too) or the
// vocabulary do not divide among `ranks`, or when the kv heads neither divide among the ranks
// nor the ranks among the kv heads.
std::vector<shard_shape> shard_shapes(const model_config& model, int ranks);

// The one rank that holds the whole model: shard_shapes(model, 1)[0] without its checks, which
// are about sharing out; loading or generating a whole model has nothing to share.
shard_shape whole_model_shard(const model_config& model);

} // namespace troupe::runtime
