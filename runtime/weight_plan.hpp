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

// How a checkpoint stores a mixture-of-experts layer's experts, under
// model.layers.N.<prefix>: the router gate.weight, then either one tensor per expert and projection
// (transformers 4.x: Mixtral's experts.E.w1 / w3 / w2, Qwen's experts.E.gate_proj / up_proj / down_proj)
// or transformers 5's stacks experts.gate_up_proj [experts, 2 * I, hidden] (each expert's gate rows, then
// its up rows) and experts.down_proj [experts, hidden, I], with or without a ".weight" suffix.
struct expert_layout {
  std::string prefix = "mlp."; // or Mixtral 4.x's "block_sparse_moe."
  bool fused = true;
  std::string suffix;                              // fused: "" or ".weight"
  std::string gate = "w1", up = "w3", down = "w2"; // per expert: Mixtral's, or gate_proj, up_proj, down_proj
};

// The layout `store` has (read from layer 0); when it has none of them, the family's transformers 4.x one,
// so that the missing tensors are named as the user most likely expects them.
expert_layout find_expert_layout(const tensor_store& store, const model_config& model);

// One stored tensor as a rank reads it. Its whole shape is [rows, columns], or [rows] for a
// vector (one column), or a stack [matrices, rows, columns] (a fused experts tensor) of which one
// matrix is read; the rank keeps the block [row_begin, + rows) x [column_begin, + columns),
// row-major, in *destination from element `offset` on: the layout shard_weights gives.
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
  std::size_t matrix = 0;      // a stack's: which matrix the block is in
  std::size_t offset = 0;      // where the block starts in *destination (an expert's place among the experts)

  // The whole matrix's row length: the last dimension, or 1 for a vector.
  std::size_t whole_columns() const noexcept;
  // Its rows: shape[0], or a stack's shape[1].
  std::size_t whole_rows() const noexcept;
  // The stored element where the block's matrix starts.
  std::size_t matrix_begin() const noexcept { return matrix * whole_rows() * whole_columns(); }
};

// Every tensor of `model` in the order HF stores and dummy_weights generates them, each with
// rank shard.rank's block and its place in `weights`, whose layers this sizes (the plan points
// into `weights`: keep it where it is while the plan is used). With tied embeddings the plan
// has no LM head: there is none stored to read (see keep_tied_lm_head_rows).
// A mixture-of-experts model's experts are planned as `experts` stores them (dummy weights: the default).
std::vector<planned_tensor> plan_weights(const model_config& model, const shard_shape& shard, model_weights& weights,
                                         const expert_layout& experts = {});

// A rank's LM head when the embeddings are tied: its rows [vocab_begin, + vocab) of the
// embed_tokens it holds, copied into lm_head, as shard_weights gives every rank an lm_head of its
// own. Does nothing for untied models (their lm_head comes from the plan).
void keep_tied_lm_head_rows(model_weights& weights, const model_config& model, const shard_shape& shard);

} // namespace troupe::runtime
