// The CUDA backend: the same Llama forward pass as the CPU runner, on one GPU, in
// float32, bfloat16 or float16 with fp32 accumulation, over a paged KV cache in device memory
// with a pinned host tier for swapping. Built only with CUDA; others use the factory.
// Its parts: the memory plan (runtime/cuda_memory_plan.hpp), the weights (cuda_weights.cpp), the
// forward pass (cuda_forward.cpp) and the CUDA graphs of decode steps (cuda_graph_cache.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "kernels/cuda/cublaslt_gemm.hpp"
#include "kernels/cuda/cuda_stream.hpp"
#include "kernels/cuda/device_buffer.hpp"
#include "runtime/cuda/cuda_graph_cache.hpp"
#include "runtime/cuda/device_collective.hpp"
#include "runtime/cuda/cuda_row_sampler.hpp"
#include "runtime/cuda/cuda_runner_factory.hpp"
#include "runtime/cuda/cuda_step.hpp"
#include "runtime/model_runner.hpp"
#include "runtime/model_weights.hpp"

namespace troupe::runtime {

// engine.deterministic: attention splits each token's context into at most this many partitions,
// whatever the batch (paged_attention_params::invariant_parts). 8 fills an H100/H200 at batch 1
// with 32-40 KV heads (256-320 blocks) and keeps the workspace at 8 partials per token and head.
inline constexpr int deterministic_attention_parts = 8;

// A runner's place in a tensor-parallel group: its share of the model and its endpoint of the
// group's collectives (the runner owns it).
struct cuda_rank {
  shard_shape shard;
  std::unique_ptr<device_collective> group;
};

class cuda_model_runner final : public model_runner {
 public:
  // Without a rank the runner holds the whole model. With one, `weights` is the rank's shard
  // (shard_weights; with options.dummy_weights, dummy weights of the shard's shapes), the KV
  // pool holds the rank's kv heads, o_proj and down_proj end in an all-reduce and the LM head's
  // slices are gathered, so every rank of the group must run the same steps at the same time
  // (make_cuda_rank_runners builds them so, each on a thread of its own).
  cuda_model_runner(const model_config& config, const model_weights& weights, const cuda_runner_options& options,
                    cuda_rank rank = {});

  const model_config& config() const override { return config_; }
  const kv_cache_config& cache_config() const override { return cache_; }
  void execute(const step_batch& batch, std::span<float> logits) override;
  bool samples_on_device(std::span<const device_sample> rows) const override {
    return options_.device_sampling &&
           cuda_row_sampler::logits_rows_needed(rows) <= static_cast<std::size_t>(logits_rows_);
  }
  void execute_sampled(const step_batch& batch, std::span<const device_sample> rows, std::span<token_id> tokens,
                       std::span<token_logprobs> logprobs, const std::function<void()>& before_draw = {}) override;
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
  std::size_t block_bytes() const override { return plan_.kv_block_bytes; }

  // This rank's share (the whole model without a rank) and its group (null without one).
  const shard_shape& shard() const { return shard_; }
  device_collective* group() const { return group_.get(); }

  const cuda_memory_plan& memory_plan() const { return plan_; }
  // Decode steps run by replaying a CUDA graph so far (options.cuda_graphs), and why graphs
  // were turned off if a capture failed ("" if none did; the step then ran kernel by kernel).
  std::uint64_t graph_replays() const { return graphs_.replays(); }
  const std::string& graph_error() const { return graphs_.error(); }
  // Pauses (false) and resumes graph replay of a runner built with options.cuda_graphs, so
  // that a benchmark can time both on one runner; no effect on a runner built without.
  void use_cuda_graphs(bool on) { graphs_.pause(!on); }

 private:
  using bytes = kernels::cuda::device_buffer<std::byte>;
  // A linear layer's weight [n, k]: in the runner's dtype, or (options.fp8_weights) FP8 e4m3
  // codes with an fp32 scale per row and group of columns (kernels/cuda/fp8_linear.hpp), or
  // (options.int4_weights) 4-bit codes with a {scale, zero} per row and group
  // (kernels/cuda/int4_linear.hpp).
  struct linear_weight {
    enum class form { dense, fp8, int4 };
    form kind = form::dense;
    bytes dense;                                // [n, k] of the dtype; empty unless dense
    bytes codes;                                // fp8: [n, k] e4m3; int4: [n, k / 8] 32-bit words
    kernels::cuda::device_buffer<float> scales; // fp8: [n, k / group]; int4: [n, k / group] {scale, zero}
    int group = 0;
    int columns = 0; // k
    bool fp8() const noexcept { return kind == form::fp8; }
    bool int4() const noexcept { return kind == form::int4; }
    // The dequantized matrix's elements (the scratch a step of many rows needs), 0 when dense.
    std::size_t quantized_elements() const noexcept {
      return kind == form::fp8 ? codes.size() : kind == form::int4 ? 2 * codes.size() : 0;
    }
  };
  struct layer {
    bytes input_norm;      // [hidden]
    linear_weight qkv;     // [(heads + 2 * kv_heads) * head_dim, hidden]: q rows, then k, then v
    bytes qkv_bias;        // [(heads + 2 * kv_heads) * head_dim], or empty
    bytes q_norm;          // [head_dim], every q head's RMSNorm weight (qk_norm), or empty
    bytes k_norm;          // [head_dim], every k head's RMSNorm weight (qk_norm), or empty
    linear_weight o;       // [hidden, heads * head_dim]
    bytes post_norm;       // [hidden]: the MLP's input norm, or with sandwich_norms the attention output's
    bytes pre_mlp_norm;    // [hidden] with sandwich_norms (Gemma), else empty
    bytes post_mlp_norm;   // [hidden] with sandwich_norms, else empty
    linear_weight gate_up; // [2 * intermediate, hidden]: gate rows, then up rows (a MoE model's shared expert)
    linear_weight down;    // [hidden, intermediate]
    // A mixture-of-experts layer's (cuda_moe.cpp); empty otherwise. I: the rank's expert width.
    bytes router;          // [experts (+ 1), hidden]: the router's rows, then Qwen2-MoE's shared-expert gate
    bytes experts_gate_up; // [experts, 2 * I, hidden]: each expert's gate rows, then its up rows
    bytes experts_down;    // [experts, hidden, I]
  };
  // One part of a linear layer as loaded: fp32 [rows, columns] values and their FP8 scales (empty
  // when not FP8). q|k|v and gate|up are uploaded as one weight of several parts.
  struct linear_part {
    std::span<const float> values;
    const fp8_scales* scales;
    const int4_groups* groups = nullptr;
  };
  using step_inputs = cuda_step_inputs; // inside inputs_device_, or the graphs' inputs
  using step_shape = cuda_step_shape;
  using step_status = cuda_step_status;

  // Weights (cuda_weights.cpp): each fills embed_, final_norm_, lm_head_ and layers_, and returns their bytes.
  std::size_t upload_weights(const model_weights& weights); // converted to options_.dtype
  std::size_t make_dummy_weights();                         // options_.dummy_weights
  bytes upload(std::span<const float> values) const;        // converted to options_.dtype
  // The parts' rows one after another, in the dtype, or as FP8 codes and scales with
  // options_.fp8_weights (a part without scales gets one a row, amax / 448).
  linear_weight upload_linear(std::initializer_list<linear_part> parts, std::size_t columns, const char* name) const;
  // options_.int4_weights: the parts' codes and groups, or the dense form when a part has no groups
  // (a layer the checkpoint left unquantized).
  linear_weight upload_int4_linear(std::initializer_list<linear_part> parts, std::size_t columns,
                                   const char* name) const;
  linear_weight make_dummy_linear(std::size_t rows, std::size_t columns, std::uint64_t& tensor, std::size_t& total);
  linear_weight make_dummy_int4_linear(std::size_t rows, std::size_t columns, std::uint64_t& tensor,
                                       std::size_t& total);
  // Packs the batch's arrays into inputs_host_ (growing it only if a step outgrows the
  // sizing hints); `bytes` receives how much to copy; the result points into inputs_device_.
  step_inputs stage_inputs(const step_batch& batch, std::size_t& bytes);
  // The forward pass (cuda_forward.cpp), queued on compute_.
  template <class T, class C>
  void forward(const step_shape& shape, const step_inputs& in, step_status& status);
  void run_forward(const step_shape& shape, const step_inputs& in, step_status& status); // dtype dispatch
  // A mixture-of-experts layer's MLP (cuda_moe.cpp): out[rows, hidden] = the routed experts' weighted
  // sum over h, plus sigmoid(gate) * shared[rows, hidden] (Qwen2-MoE's shared expert, already run;
  // null: none), this rank's term of it; false after a failure recorded in status.
  template <class T>
  bool moe_mlp(const layer& w, const T* h, const T* shared, T* out, int rows, step_status& status);
  // A step in three parts: checks (false: nothing to run), the forward pass queued on the
  // compute stream (a graph replay or kernel by kernel), and the wait that throws its failure.
  bool begin_step(const step_batch& batch);
  // Runs a step's parts; a rank whose step fails aborts its group first, so that the other
  // ranks give up their waits for it instead of timing out.
  template <class F>
  void as_rank(F&& step);
  void launch_step(const step_batch& batch, step_status& status);
  void finish_step(const step_status& status);
  std::byte* kv_pool(bool host, int layer, int which) const; // which: 0 = K, 1 = V

  model_config config_;
  cuda_runner_options options_;
  shard_shape shard_;                      // the whole model without a rank
  model_config local_;                     // config_ with this rank's heads and MLP width (sizes its buffers)
  std::unique_ptr<device_collective> group_; // null without a rank
  kv_cache_config cache_;
  cuda_memory_plan plan_;
  std::size_t act_bytes_; // bytes of one activation or weight element (4 or 2)

  kernels::cuda::cuda_stream compute_, copy_;
  kernels::cuda::cuda_event compute_idle_, copies_done_;
  kernels::cuda::cublaslt_gemm gemm_;

  std::vector<layer> layers_;
  bytes embed_;                                  // [vocab, hidden]
  bytes final_norm_;                             // [hidden]
  bytes lm_head_;                                // [vocab, hidden]; empty when tied to embed_
  kernels::cuda::device_buffer<float> inv_freq_; // [head_dim / 2]
  kernels::cuda::device_buffer<float> sliding_inv_freq_; // [head_dim / 2] when sliding layers rotate otherwise
  std::vector<float> k_scale_, v_scale_;         // per layer (fp8 cache)

  // Activations for max_num_batched_tokens rows, allocated once.
  int max_tokens_;
  int logits_rows_; // rows logits_ holds: max_tokens_, plus the sampler's scratch rows when deterministic
  bytes x_, h_, proj_;       // [T, hidden]: residual, normed, a projection's output
  bytes wide_;               // [T, max(qkv width, 2 * intermediate)]: QKV, then gate|up
  bytes mid_;                // [T, max(heads * head_dim, intermediate)]: attention out, then the activation
  bytes last_x_, last_proj_; // [T, hidden]: the logits rows of x and proj, then normed
  // Mixture of experts (plan_activations' moe_* buffers): routing arrays, the entries' rows, and the
  // offsets copied to the host when a long prefill runs one GEMM per expert.
  kernels::cuda::device_buffer<float> moe_router_;
  bytes moe_routing_, moe_entries_, moe_wide_, moe_mid_;
  kernels::cuda::pinned_buffer<int> moe_offsets_host_;
  int moe_rows_ = 0;
  bytes dequantized_;        // FP8 weights: the largest linear layer in the dtype, for steps past the FP8 GEMV
  kernels::cuda::device_buffer<float> logits_;                     // [T, vocab]
  kernels::cuda::device_buffer<float> vocab_logits_;               // a rank's [T, vocab slice], before the gather
  kernels::cuda::device_buffer<float> attention_ws_;               // paged attention's split-K partials
  kernels::cuda::device_buffer<std::uint32_t> attention_counters_; // and their counters (zero between calls)

  // Step inputs: packed into pinned memory, one copy to the device per step.
  kernels::cuda::pinned_buffer<std::byte> inputs_host_;
  bytes inputs_device_;
  // Sampling on the device: penalties, the draw and log-probabilities of a step's rows.
  cuda_row_sampler sampler_;

  // CUDA graphs of decode steps (options.cuda_graphs), captured at construction.
  cuda_graph_cache graphs_;

  // KV pools: [layer][K, V][num_blocks][kv_heads, block_size, head_dim], device and pinned host.
  std::size_t block_slice_bytes_; // one block of one layer's K (or V)
  bytes kv_device_;
  kernels::cuda::pinned_buffer<std::byte> kv_host_;
};

} // namespace troupe::runtime
