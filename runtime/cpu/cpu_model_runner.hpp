// The CPU backend: an fp32 Llama forward pass over a paged KV cache. It is the
// numerical reference of troupe: the golden files, the CUDA backend and every
// batching/caching invariant are checked against it.
#pragma once

#include <memory>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/model_runner.hpp"
#include "runtime/model_weights.hpp"

namespace troupe::runtime {

class cpu_model_runner final : public model_runner {
 public:
  // threads: workers for the kernels' parallel loops (0 = all cores).
  cpu_model_runner(model_config config, model_weights weights, kv_cache_config cache, std::size_t threads = 0);

  const model_config& config() const override { return config_; }
  const kv_cache_config& cache_config() const override { return cache_; }
  void execute(const step_batch& batch, std::span<float> logits) override;
  void copy_blocks(kv_copy kind, std::span<const block_copy> pairs) override;
  std::size_t block_bytes() const override;

  // [num_blocks, kv_heads, block_size, head_dim] per layer; exposed for swap copies and tests.
  std::span<float> k_cache(int layer) { return k_cache_[layer]; }
  std::span<float> v_cache(int layer) { return v_cache_[layer]; }
  std::span<float> host_k_cache(int layer) { return host_k_cache_[layer]; }
  std::span<float> host_v_cache(int layer) { return host_v_cache_[layer]; }

 private:
  struct layer {
    std::vector<float> gate_up;  // [2 * intermediate, hidden]: gate rows then up rows, one GEMM
  };
  void ensure_scratch(std::size_t tokens);

  model_config config_;
  model_weights weights_;
  kv_cache_config cache_;
  std::vector<layer> fused_;
  std::vector<float> inv_freq_;
  std::vector<std::vector<float>> k_cache_, v_cache_;            // device tier
  std::vector<std::vector<float>> host_k_cache_, host_v_cache_;  // host tier (swap space)
  kernels::cpu::thread_pool pool_;
  // Scratch grows to the largest step seen and is reused: no allocation per step after warm-up.
  std::vector<float> x_, h_, q_, k_, v_, attn_, proj_, gate_up_, act_, last_;
};

} // namespace troupe::runtime
