// Which stored tensors one tensor-parallel rank reads, and which block of each it keeps: the
// one list that loading from safetensors and generating dummy weights both walk, so that a
// rank's slices come straight from their source and the whole model is the plan of one rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model_config.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/shard_shape.hpp"

namespace troupe::runtime {

// One stored tensor as a rank reads it. Its whole shape is [rows, columns], or [rows] for a
// vector (one column); the rank keeps the block [row_begin, + rows) x [column_begin, + columns),
// row-major, in *destination: the layout shard_weights gives.
struct planned_tensor {
  // Dummy weights fill each kind differently (normal(0, 0.02), ones, zeros).
  enum class role { matrix, norm, bias };

  std::string name;           // as HF names it in model.safetensors
  std::vector<int64_t> shape; // the whole tensor's, from config.json
  role kind = role::matrix;
  std::size_t row_begin = 0, rows = 0;
  std::size_t column_begin = 0, columns = 0;
  std::vector<float>* destination = nullptr;
  fp8_scales* fp8 = nullptr;   // the seven linear layers: where an FP8 checkpoint's scales go
  int4_groups* int4 = nullptr; // the seven linear layers: where an AWQ checkpoint's scales and zeros go

  // The whole tensor's row length: shape[1], or 1 for a vector.
  std::size_t whole_columns() const noexcept;
};

// Every tensor of `model` in the order HF stores and dummy_weights generates them, each with
// rank shard.rank's block and its place in `weights`, whose layers this sizes (the plan points
// into `weights`: keep it where it is while the plan is used). With tied embeddings the plan
// has no LM head: there is none stored to read (see keep_tied_lm_head_rows).
std::vector<planned_tensor> plan_weights(const model_config& model, const shard_shape& shard, model_weights& weights);

// A rank's LM head when the embeddings are tied: its rows [vocab_begin, + vocab) of the
// embed_tokens it holds, copied into lm_head, as shard_weights gives every rank an lm_head of its
// own. Does nothing for untied models (their lm_head comes from the plan).
void keep_tied_lm_head_rows(model_weights& weights, const model_config& model, const shard_shape& shard);

} // namespace troupe::runtime
