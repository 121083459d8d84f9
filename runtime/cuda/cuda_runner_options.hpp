// The CUDA runner's options: element types of weights, activations and the KV cache, the
// device, the memory budget and step limits, and the fast paths as switches. CUDA-free.
#pragma once

#include <cstdint>

namespace troupe::runtime {

// Element type of weights and activations on the GPU (accumulation is fp32 either way).
enum class cuda_dtype { float32, bfloat16, float16 };

// Element type of the paged KV cache. fp8_e4m3 stores value / scale with one scale for
// K and one for V per layer; the scales are 1.0 for now (no calibration), which suits
// models whose K/V stay well inside e4m3's range of ±448.
enum class kv_cache_dtype { float32, bfloat16, float16, fp8_e4m3 };

// The cache type that stores the model's own dtype (the other choice is fp8_e4m3).
constexpr kv_cache_dtype own_cache_dtype(cuda_dtype d) noexcept {
  return d == cuda_dtype::float32   ? kv_cache_dtype::float32
         : d == cuda_dtype::float16 ? kv_cache_dtype::float16
                                    : kv_cache_dtype::bfloat16;
}

// Names as the config and the logs spell them.
constexpr const char* to_string(cuda_dtype d) noexcept {
  return d == cuda_dtype::float32 ? "float32" : d == cuda_dtype::float16 ? "float16" : "bfloat16";
}
constexpr const char* to_string(kv_cache_dtype d) noexcept {
  switch (d) {
    case kv_cache_dtype::float32:
      return "float32";
    case kv_cache_dtype::float16:
      return "float16";
    case kv_cache_dtype::fp8_e4m3:
      return "fp8_e4m3";
    default:
      return "bfloat16";
  }
}

struct cuda_runner_options {
  cuda_dtype dtype = cuda_dtype::bfloat16;
  kv_cache_dtype kv_dtype = kv_cache_dtype::bfloat16; // the model's dtype, or fp8_e4m3
  int device = 0;
  int block_size = 16;                  // tokens per KV block, 1..256
  int num_blocks = 0;                   // > 0: exactly this many device blocks; 0: sized from memory
  int max_blocks = 0;                   // > 0: at most this many when sized from memory
  double gpu_memory_utilization = 0.9;  // fraction of the device's memory for weights + activations + KV
  int num_host_blocks = 0;              // pinned host blocks (swap space)
  int max_num_batched_tokens = 2048;    // activation buffers hold this many tokens; a bigger step is refused
  int max_num_seqs = 256;               // sizes the staging of per-sequence arrays (grown if ever exceeded)
  int max_blocks_per_seq = 0;           // likewise for block tables (0: enough for the model's context)
  float k_scale = 1.0f, v_scale = 1.0f; // fp8 cache: stored = value / scale, for every layer
  // model.load-format=dummy: weights of the config's shapes made on the GPU from a hash of
  // (dummy_seed, tensor, element), matrices normal(0, 0.02), norms 1, biases 0; the
  // factory's `weights` is not read (pass an empty model_weights). For benchmarks: the
  // speed of a step does not depend on the values, and nothing is read from disk.
  bool dummy_weights = false;
  std::uint64_t dummy_seed = 0;
  // Decode steps (one token per sequence, logits for each) replay a CUDA graph captured
  // on first use for the batch size rounded up to 1, 2, 4, 8, 12, 16, 24, 32, 48, 64, ...
  // (every 16 from 32 up to max_num_seqs); the padding rows compute nothing that is kept.
  // Other steps (prefill, mixed, speculative verification) run kernel by kernel.
  bool cuda_graphs = true;
  // Steps of sampled rows (no prompt rows to score, no drafts to verify) are penalised,
  // sampled and scored on the GPU (execute_sampled, cuda_row_sampler), and only the tokens
  // and asked-for logprobs come back; off, every step copies its logits to the host sampler.
  bool device_sampling = true;
  // bf16 and fp16 linear layers where kernels::cuda::gemv_preferred holds (every linear layer of a
  // batch-1 decode step) run through the weight-streaming GEMV (kernels/cuda/gemv.hpp) rather
  // than cuBLASLt; off, every linear layer goes through cuBLASLt.
  bool small_batch_gemv = true;
  // engine.deterministic: a row's logits do not depend on the other rows of its step, on its
  // position among them, or on how its prompt was cut into chunks. Every linear layer runs
  // cuBLASLt's one unsplit algorithm of its (n, k) whatever m is (gemm_selection::batch_invariant;
  // no GEMV), attention runs every token through the split-K kernels with partitions cut from its
  // own context (paged_attention_params::invariant_parts; no query tiles), and the logits buffer holds the
  // sampler's scratch rows for any batch, so that no step leaves the device sampler for the host's.
  bool deterministic = false;
  // The seven linear layers of each decoder layer kept as FP8 e4m3 codes with fp32 scales (the
  // weights' fp8_scales, or a scale a row computed at upload where a layer has none): up to
  // kernels::cuda::fp8_gemv_max_rows rows through the FP8 GEMV, which dequantizes in registers;
  // more rows dequantize the layer into a scratch matrix of dtype for cuBLASLt. Dummy weights:
  // random codes, scales that give them normal(0, 0.02)'s spread.
  bool fp8_weights = false;
  // The seven linear layers kept as 4-bit codes with a {scale, zero} per row and group (an AWQ
  // checkpoint's, recovered exactly from the values it was dequantized to; a layer the checkpoint
  // left unquantized stays in dtype): up to kernels::cuda::int4_gemv_max_rows rows through the
  // INT4 GEMV, which dequantizes in registers; more rows dequantize the layer into a scratch matrix
  // of dtype for cuBLASLt. Dummy weights: random codes, zero 8 and one scale that give them roughly
  // normal(0, 0.02)'s spread, in groups of 128 columns (64 or 32 where 128 does not divide a layer;
  // dense where none does). Not with fp8_weights.
  bool int4_weights = false;
};

} // namespace troupe::runtime
