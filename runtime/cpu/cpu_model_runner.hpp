// The CPU backend: an fp32 Llama forward pass over a paged KV cache. It is the
// numerical reference of troupe: the golden files, the CUDA backend and every
// batching/caching invariant are checked against it. As one rank of a tensor-parallel
// group it runs its shard of the model and meets the other ranks inside the step.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/collective.hpp"
#include "runtime/cpu/cpu_moe_layer.hpp"
#include "runtime/model_runner.hpp"
#include "runtime/model_weights.hpp"

namespace troupe::runtime {

class cpu_model_runner final : public model_runner {
 public:
  // threads: workers for the kernels' parallel loops (0 = all cores). Without a rank the
  // runner holds the whole model. With one, `weights` is the rank's shard (shard_weights),
  // the KV pool holds only its kv heads, and every rank of the group must execute the same
  // steps: o_proj and down_proj end in an all-reduce, and the LM head's slices are gathered
  // so that every rank writes whole logits rows. Throws std::invalid_argument when the
  // weights are not of the model's (or the shard's) shapes.
  cpu_model_runner(model_config config, model_weights weights, kv_cache_config cache, std::size_t threads = 0,
                   std::optional<tensor_parallel_rank> rank = std::nullopt);

  // The model served; a rank's share of it is shard().
  const model_config& config() const override { return config_; }
  const shard_shape& shard() const { return shard_; }
  const kv_cache_config& cache_config() const override { return cache_; }
  void execute(const step_batch& batch, std::span<float> logits) override;
  // A rank's step when another leads: execute() into the runner's own logits rows.
  void follow_step(const step_batch& batch) override;
  void abort_group() override {
    if (group_ != nullptr)
      group_->abort();
  }
  void reset_group() override {
    if (group_ != nullptr)
      group_->reset();
  }
  void copy_blocks(kv_copy kind, std::span<const block_copy> pairs) override;
  std::size_t block_bytes() const override;

  // [num_blocks, kv_heads, block_size, head_dim] per layer (this rank's kv heads); exposed for swap copies and tests.
  std::span<float> k_cache(int layer) { return k_cache_[layer]; }
  std::span<float> v_cache(int layer) { return v_cache_[layer]; }
  std::span<float> host_k_cache(int layer) { return host_k_cache_[layer]; }
  std::span<float> host_v_cache(int layer) { return host_v_cache_[layer]; }

 private:
  struct layer {
    std::vector<float> gate_up; // [2 * intermediate, hidden]: gate rows then up rows, one GEMM (the shared expert's)
  };
  void ensure_scratch(std::size_t tokens);

  model_config config_;
  model_weights weights_;
  kv_cache_config cache_;
  shard_shape shard_;           // the whole model when the runner is not a rank
  collective* group_ = nullptr; // the other ranks; null when the runner is not a rank
  std::vector<layer> fused_;
  std::vector<float> inv_freq_;
  std::vector<float> sliding_inv_freq_; // the sliding layers' rotation, when it differs (Gemma 3)
  std::vector<std::vector<float>> k_cache_, v_cache_;           // device tier
  std::vector<std::vector<float>> host_k_cache_, host_v_cache_; // host tier (swap space)
  kernels::cpu::thread_pool pool_;
  cpu_moe_layer moe_; // a mixture-of-experts model's MLP, with its scratch
  // Scratch grows to the largest step seen and is reused: no allocation per step after warm-up.
  std::vector<float> x_, h_, q_, k_, v_, attn_, proj_, gate_up_, act_, last_;
  std::vector<float> local_logits_;    // a rank's vocabulary slice of the logits rows, before the gather
  std::vector<float> follower_logits_; // the whole rows a rank that follows gathers, and drops
};

} // namespace troupe::runtime
