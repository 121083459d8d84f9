// The CUDA runner's memory plan in bytes and blocks: one step's activation buffers, one KV
// block, and how many blocks fit the memory budget. Plain arithmetic on the model and the
// options, with no device, so that it builds without CUDA and a unit test checks it; the
// runner (runtime/cuda/) measures the device, allocates what this says and records it below.
#pragma once

#include <cstddef>

#include "runtime/cuda/cuda_runner_options.hpp"
#include "runtime/kv_geometry.hpp"
#include "runtime/model_config.hpp"

namespace troupe::runtime {

// What the runner allocated, for the engine's start-up log.
struct cuda_memory_plan {
  std::size_t total_bytes = 0;   // device memory
  std::size_t free_at_start = 0; // free before the runner allocated anything
  std::size_t weight_bytes = 0;
  std::size_t activation_bytes = 0; // activations, logits, staging, GEMM workspace
  std::size_t kv_block_bytes = 0;   // one block over all layers, K and V
  std::size_t kv_pool_bytes = 0;
  std::size_t host_pool_bytes = 0; // pinned swap space
  int num_blocks = 0, num_host_blocks = 0;
  bool blocks_from_memory = false; // false: options.num_blocks set the count
};

// Bytes of one element of weights and activations (a cached element: kv_geometry.hpp).
constexpr std::size_t element_bytes(cuda_dtype dtype) noexcept {
  return dtype == cuda_dtype::float32 ? 4 : 2;
}

// n rounded up to a multiple of `to`: each array of a step's inputs starts 16-byte aligned.
constexpr std::size_t round_up(std::size_t n, std::size_t to) noexcept {
  return (n + to - 1) / to * to;
}

// A mixture-of-experts layer runs its experts over at most this many of a step's rows at a time:
// the expert buffers below hold rows * experts_per_token entries, wider than the step's own
// (Mixtral's [entries, 2 * 14336] would be 940 MB at 8192 rows; 235 MB at this many).
inline constexpr int moe_step_rows = 2048;

// Rows of a MoE layer's router on the GPU: the experts', then Qwen2-MoE's shared-expert gate, padded
// with zero rows to a multiple of 4 so that each row of the fp32 logits starts 16-byte aligned.
inline int moe_router_rows(const moe_config& moe) {
  return static_cast<int>(round_up(static_cast<std::size_t>(moe.num_experts) + (moe.shared_expert ? 1 : 0), 4));
}

// The buffers the runner holds for its largest step, allocated once (nothing is allocated per
// step), in bytes. T = options.max_num_batched_tokens rows, in options.dtype unless said.
struct activation_buffers {
  int rows = 0;            // T
  int seqs = 0;            // sequences the staging holds: min(max_num_seqs, T)
  int blocks_per_seq = 0;  // block-table width the staging holds (see blocks_per_sequence)
  std::size_t hidden = 0;  // each of x, h, proj, last_x, last_proj: [T, hidden]
  std::size_t wide = 0;    // [T, max(qkv width, 2 * intermediate)]: QKV, then gate|up
  std::size_t mid = 0;     // [T, max(heads * head_dim, intermediate)]: attention out, then the activation
  int logits_rows = 0;     // T, and 2 * seqs more when deterministic (the sampler's scratch rows)
  std::size_t logits = 0;  // [logits_rows, vocab] fp32
  // A mixture-of-experts model's (0 otherwise), for moe_rows = min(T, moe_step_rows) rows and
  // E = moe_rows * experts_per_token entries; I is the rank's expert_intermediate_size.
  int moe_rows = 0;
  std::size_t moe_router = 0; // [moe_rows, moe_router_rows] fp32 router logits (and the shared expert's gate)
  std::size_t moe_routing =
      0; // ids, weights, sorted entries, their positions ([E] 4 bytes each), offsets [experts + 1]
  std::size_t moe_entries = 0; // [E, hidden]: the gathered rows, then the experts' outputs
  std::size_t moe_wide = 0;    // [E, 2 * I]: gate|up
  std::size_t moe_mid = 0;     // [E, I]: the activation
  std::size_t staging = 0; // one step's inputs, each array 16-byte aligned: [T] int64 slots, [T] int32
                           // tokens, positions and logits rows, [seqs + 1] query starts, [seqs, width] tables
};
activation_buffers plan_activations(const model_config& cfg, const cuda_runner_options& options);

// Block-table width a sequence may need: options.max_blocks_per_seq, or (0) enough blocks for
// the model's whole context.
int blocks_per_sequence(const model_config& cfg, const cuda_runner_options& options);

// KV blocks that fit the budget: utilization * total, less what the device already holds
// (total - free: this runner's weights and activations, and whatever else lives there), in
// whole blocks of kv_block_bytes; at most max_blocks when that is > 0. 0 when none fits.
int kv_blocks_that_fit(std::size_t total, std::size_t free, double utilization, std::size_t kv_block_bytes,
                       int max_blocks);

} // namespace troupe::runtime
