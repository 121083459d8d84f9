// The CUDA backend: the same Llama forward pass as the CPU runner, on one GPU, in
// float32, bfloat16 or float16 with fp32 accumulation, over a paged KV cache in device memory
// with a pinned host tier for swapping. Built only with CUDA; others use the factory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/cublaslt_gemm.hpp"
#include "kernels/cuda/cuda_graph.hpp"
#include "kernels/cuda/cuda_stream.hpp"
#include "kernels/cuda/device_buffer.hpp"
#include "runtime/cuda/cuda_runner_factory.hpp"
#include "runtime/model_runner.hpp"
#include "runtime/model_weights.hpp"

namespace troupe::runtime {

class cuda_model_runner final : public model_runner {
 public:
  cuda_model_runner(const model_config& config, const model_weights& weights, const cuda_runner_options& options);

  const model_config& config() const override { return config_; }
  const kv_cache_config& cache_config() const override { return cache_; }
  void execute(const step_batch& batch, std::span<float> logits) override;
  bool samples_on_device() const override { return options_.device_sampling; }
  void execute_sampled(const step_batch& batch, std::span<const device_sample> rows,
                       std::span<token_id> tokens) override;
  void copy_blocks(kv_copy kind, std::span<const block_copy> pairs) override;
  std::size_t block_bytes() const override { return plan_.kv_block_bytes; }

  const cuda_memory_plan& memory_plan() const { return plan_; }
  // Decode steps run by replaying a CUDA graph so far (options.cuda_graphs), and why graphs
  // were turned off if a capture failed ("" if none did; the step then ran kernel by kernel).
  std::uint64_t graph_replays() const { return graph_replays_; }
  const std::string& graph_error() const { return graph_error_; }
  // Pauses (false) and resumes graph replay of a runner built with options.cuda_graphs, so
  // that a benchmark can time both on one runner; no effect on a runner built without.
  void use_cuda_graphs(bool on) { graphs_paused_ = !on; }

 private:
  using bytes = kernels::cuda::device_buffer<std::byte>;
  struct layer {
    bytes input_norm; // [hidden]
    bytes qkv;        // [(heads + 2 * kv_heads) * head_dim, hidden]: q rows, then k, then v
    bytes qkv_bias;   // [(heads + 2 * kv_heads) * head_dim], or empty
    bytes o;          // [hidden, heads * head_dim]
    bytes post_norm;  // [hidden]
    bytes gate_up;    // [2 * intermediate, hidden]: gate rows, then up rows
    bytes down;       // [hidden, intermediate]
  };
  // Device pointers of this step's inputs, inside inputs_device_ (or graph_inputs_device_).
  struct step_inputs {
    const std::int64_t* slot_mapping;
    const std::int32_t *token_ids, *positions, *query_start, *block_tables, *logits_rows;
  };
  // The sizes a forward pass is launched with: the batch's, or a captured graph's padded ones.
  struct step_shape {
    int rows, seqs, max_blocks_per_seq, logit_rows;
    int min_query_len; // the fewest tokens a sequence of the step has
    int max_query_len; // the most
  };
  // The first failure of a step; later launches are skipped, and execute throws after the sync.
  struct step_status {
    int code = 0; // cudaError_t or cublasStatus_t
    const char* what = nullptr;
    bool cublas = false;
    bool ok() const { return what == nullptr; }
  };

  bytes upload(std::span<const float> values) const; // converted to options_.dtype
  std::size_t make_dummy_weights();                   // options_.dummy_weights: fills the weights; returns their bytes
  // Packs the batch's arrays into inputs_host_ (growing it only if a step outgrows the
  // sizing hints); `bytes` receives how much to copy; the result points into inputs_device_.
  step_inputs stage_inputs(const step_batch& batch, std::size_t& bytes);
  template <class T, class C>
  void forward(const step_shape& shape, const step_inputs& in, step_status& status);
  void run_forward(const step_shape& shape, const step_inputs& in, step_status& status); // dtype dispatch
  // A step in three parts: checks (false: nothing to run), the forward pass queued on the
  // compute stream (a graph replay or kernel by kernel), and the wait that throws its failure.
  bool begin_step(const step_batch& batch);
  void launch_step(const step_batch& batch, step_status& status);
  void finish_step(const step_status& status);
  // CUDA graphs: the captured size a decode step pads to, or -1 if the step runs kernel by kernel.
  void plan_graph_inputs(int max_seqs, int table_width);
  int graph_slot(const step_batch& batch) const;
  void run_graph(const step_batch& batch, int slot, step_status& status);
  void capture_graphs(); // every planned size, at construction
  void capture_graph(int slot, const step_shape& shape);
  std::byte* kv_pool(bool host, int layer, int which) const; // which: 0 = K, 1 = V

  model_config config_;
  cuda_runner_options options_;
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
  std::vector<float> k_scale_, v_scale_;         // per layer (fp8 cache)

  // Activations for max_num_batched_tokens rows, allocated once.
  int max_tokens_;
  bytes x_, h_, proj_;       // [T, hidden]: residual, normed, a projection's output
  bytes wide_;               // [T, max(qkv width, 2 * intermediate)]: QKV, then gate|up
  bytes mid_;                // [T, max(heads * head_dim, intermediate)]: attention out, then the activation
  bytes last_x_, last_proj_; // [T, hidden]: the logits rows of x and proj, then normed
  kernels::cuda::device_buffer<float> logits_; // [T, vocab]
  kernels::cuda::device_buffer<float> attention_ws_; // paged attention's split-K partials
  kernels::cuda::device_buffer<std::uint32_t> attention_counters_; // and their counters (zero between calls)

  // Step inputs: packed into pinned memory, one copy to the device per step.
  kernels::cuda::pinned_buffer<std::byte> inputs_host_;
  bytes inputs_device_;
  // Sampling on the device: [rows] kernels::cuda::sample_row_params, then [rows] int32 tokens
  // at sampled_tokens_offset_, pinned on the host and mirrored on the device.
  kernels::cuda::pinned_buffer<std::byte> sample_params_host_;
  bytes sample_params_device_;
  std::size_t sampled_tokens_offset_ = 0;

  // CUDA graphs of decode steps, one per padded batch size (graph_sizes_, ascending), captured
  // on first use. Their inputs sit at fixed addresses: [G] slots, tokens, positions, logits
  // rows (0..G-1), [G + 1] query starts, then [G, graph_table_width_] block tables.
  std::vector<int> graph_sizes_;
  std::vector<kernels::cuda::cuda_graph> graphs_;
  int graph_table_width_ = 0;
  std::size_t graph_tables_offset_ = 0;
  kernels::cuda::pinned_buffer<std::byte> graph_inputs_host_;
  bytes graph_inputs_device_;
  step_inputs graph_in_{};
  std::uint64_t graph_replays_ = 0;
  std::string graph_error_;
  bool graphs_paused_ = false;

  // KV pools: [layer][K, V][num_blocks][kv_heads, block_size, head_dim], device and pinned host.
  std::size_t block_slice_bytes_; // one block of one layer's K (or V)
  bytes kv_device_;
  kernels::cuda::pinned_buffer<std::byte> kv_host_;
};

} // namespace troupe::runtime
