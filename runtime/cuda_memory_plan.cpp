// The CUDA runner's memory plan: the arithmetic behind runtime/cuda_memory_plan.hpp.
#include "runtime/cuda_memory_plan.hpp"

#include <algorithm>
#include <cmath>

namespace troupe::runtime {

int blocks_per_sequence(const model_config& cfg, const cuda_runner_options& options) {
  return options.max_blocks_per_seq > 0 ? options.max_blocks_per_seq
                                        : blocks_for_tokens(cfg.max_position_embeddings, options.block_size);
}

activation_buffers plan_activations(const model_config& cfg, const cuda_runner_options& options) {
  const int hidden = cfg.hidden_size, heads = cfg.num_attention_heads, kv_heads = cfg.num_key_value_heads,
            hd = cfg.head_dim, inter = cfg.intermediate_size;
  const int qkv_width = (heads + 2 * kv_heads) * hd;
  activation_buffers a;
  a.rows = options.max_num_batched_tokens;
  a.seqs = std::min(options.max_num_seqs, a.rows);
  a.blocks_per_seq = blocks_per_sequence(cfg, options);
  const std::size_t rows = a.rows, element = element_bytes(options.dtype);
  auto activation = [&](std::size_t width) { return rows * width * element; };
  a.hidden = activation(hidden);
  a.wide = activation(std::max(qkv_width, 2 * inter));
  a.mid = activation(std::max(heads * hd, inter));
  // A sampled row may take two scratch rows (penalties; logit edits with logprobs): with them
  // every batch fits, and a deterministic engine never moves a step to the host sampler.
  a.logits_rows = a.rows + (options.deterministic ? 2 * a.seqs : 0);
  a.logits = static_cast<std::size_t>(a.logits_rows) * cfg.vocab_size * sizeof(float);
  if (cfg.moe) {
    const auto& m = *cfg.moe;
    a.moe_rows = std::min(a.rows, moe_step_rows);
    const std::size_t entries = static_cast<std::size_t>(a.moe_rows) * m.experts_per_token;
    a.moe_router = static_cast<std::size_t>(a.moe_rows) * moe_router_rows(m) * sizeof(float);
    a.moe_routing = 4 * round_up(entries * 4, 16) + round_up((m.num_experts + 1) * 4, 16);
    a.moe_entries = entries * hidden * element;
    a.moe_wide = entries * 2 * m.expert_intermediate_size * element;
    a.moe_mid = entries * m.expert_intermediate_size * element;
  }
  a.staging = round_up(rows * 8, 16) + 3 * round_up(rows * 4, 16) + round_up((a.seqs + 1) * 4, 16) +
              round_up(static_cast<std::size_t>(a.seqs) * a.blocks_per_seq * 4, 16);
  return a;
}

int kv_blocks_that_fit(std::size_t total, std::size_t free, double utilization, std::size_t kv_block_bytes,
                       int max_blocks) {
  const double budget = utilization * static_cast<double>(total) - static_cast<double>(total - free);
  const double fit = budget > 0 ? std::floor(budget / static_cast<double>(kv_block_bytes)) : 0.0;
  int blocks = static_cast<int>(std::min(fit, 1e9));
  if (max_blocks > 0)
    blocks = std::min(blocks, max_blocks);
  return blocks;
}

} // namespace troupe::runtime
