// fp32 copies of every tensor a Llama-family model needs (norm weights as stored: Gemma's are offsets from 1,
// see model_config::norm_weight_offset) (or of a tensor-parallel rank's slices
// of them), shape-checked against model_config and converted from F32/F16/BF16 (the CPU backend
// computes in fp32).
#pragma once

#include "runtime/model_config.hpp"
#include "runtime/safetensors.hpp"
#include "runtime/shard_shape.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace troupe::runtime {

// The FP8 e4m3 form of a linear layer whose fp32 values are e4m3 codes times these scales (an
// FP8 checkpoint's, or model.quantization=fp8's): row i, columns [g * group, + group) have the
// scale values[i * (columns / group) + g]. The CPU computes with the fp32 values; the CUDA runner
// keeps the codes (value / scale, exact) and the scales on the device. Empty: not FP8.
struct fp8_scales {
  std::size_t group = 0;     // columns per scale (a row's width for per-tensor and per-channel scales)
  std::vector<float> values; // [rows, columns / group]

  bool empty() const noexcept { return values.empty(); }
};

// The INT4 form of a linear layer whose fp32 values are (code - zero) * scale with 4-bit codes
// (an AWQ checkpoint's): row i, columns [g * group, + group) have scale and zero at
// [i * (columns / group) + g]. The CPU computes with the fp32 values; the CUDA runner keeps the
// codes (recovered exactly: runtime/int4_packing.hpp) and these on the device. Empty: not INT4.
struct int4_groups {
  std::size_t group = 0;     // columns per scale and zero
  std::vector<float> scales; // [rows, columns / group]
  std::vector<float> zeros;  // [rows, columns / group], integers in [0, 15]

  bool empty() const noexcept { return scales.empty(); }
};

// Matrices are row-major [out_features, in_features], as HF stores nn.Linear weights.
struct layer_weights {
  std::vector<float> input_norm;          // [hidden]
  std::vector<float> q_proj;              // [heads * head_dim, hidden]
  std::vector<float> k_proj;              // [kv_heads * head_dim, hidden]
  std::vector<float> v_proj;              // [kv_heads * head_dim, hidden]
  std::vector<float> q_bias;              // [heads * head_dim]; empty unless attention_bias
  std::vector<float> k_bias;              // [kv_heads * head_dim]; empty unless attention_bias
  std::vector<float> v_bias;              // [kv_heads * head_dim]; empty unless attention_bias
  std::vector<float> q_norm;              // [head_dim], every q head's RMSNorm weight; empty unless qk_norm
  std::vector<float> k_norm;              // [head_dim], every k head's RMSNorm weight; empty unless qk_norm
  std::vector<float> o_proj;              // [hidden, heads * head_dim]
  // [hidden]: the MLP's input norm, or with sandwich_norms (Gemma) the attention output's norm
  std::vector<float> post_attention_norm;
  std::vector<float> pre_feedforward_norm;  // [hidden], the MLP's input norm; empty unless sandwich_norms
  std::vector<float> post_feedforward_norm; // [hidden], the MLP output's norm; empty unless sandwich_norms
  // The dense MLP; on a mixture-of-experts layer the shared expert (Qwen2-MoE), or empty.
  std::vector<float> gate_proj;           // [intermediate, hidden]
  std::vector<float> up_proj;             // [intermediate, hidden]
  std::vector<float> down_proj;           // [hidden, intermediate]
  // A mixture-of-experts layer's (model_config::moe; empty otherwise). Per expert e, rows
  // [e * 2 * I, + I) are its gate projection and the next I rows its up projection (I: the rank's
  // expert_intermediate), as transformers 5 stores experts.gate_up_proj, whichever layout the checkpoint had.
  // The router and shared_expert_gate are whole on every rank (see weight_shard.hpp).
  std::vector<float> router;             // [experts, hidden]
  std::vector<float> experts_gate_up;    // [experts, 2 * I, hidden]
  std::vector<float> experts_down;       // [experts, hidden, I]
  std::vector<float> shared_expert_gate; // [hidden] (stored [1, hidden]): the shared expert scales by sigmoid(w · x)
  // The seven linear layers' FP8 scales, when they are FP8 (see fp8_scales).
  fp8_scales q_proj_fp8, k_proj_fp8, v_proj_fp8, o_proj_fp8, gate_proj_fp8, up_proj_fp8, down_proj_fp8;
  // Their INT4 groups, when they are INT4 (see int4_groups).
  int4_groups q_proj_int4, k_proj_int4, v_proj_int4, o_proj_int4, gate_proj_int4, up_proj_int4, down_proj_int4;
};

struct model_weights {
  std::vector<float> embed_tokens; // [vocab, hidden]
  std::vector<float> final_norm;   // [hidden]
  std::vector<float> lm_head;      // [vocab, hidden]; empty when tied (use embed_tokens)
  std::vector<layer_weights> layers;

  // The [vocab, hidden] matrix that turns the last hidden state into logits.
  std::span<const float> output_projection() const;
};

// Loads and converts every tensor (the linear layers of a quantized checkpoint, as cfg.quantization
// describes them, are dequantized: runtime/quantized_linear.hpp); throws model_error naming the file and tensor for a
// missing tensor, a shape that differs from cfg, or a tensor cfg has no use for (a
// stray bias or an extra layer means config.json and the weights disagree).
// lm_head.weight is required unless cfg.tie_word_embeddings; when tied it is ignored.
model_weights load_model_weights(const tensor_store& store, const model_config& cfg);

// Rank shard.rank's share of the model, read from the mapping slice by slice: equal, bit for
// bit, to shard_weights(load_model_weights(store, cfg), cfg, shard), without the whole model
// ever being in memory (embeddings and norms are whole in every rank anyway). The same checks
// and model_errors as load_model_weights, on the whole tensors' shapes. With tied embeddings
// lm_head holds the rank's rows of embed_tokens, as shard_weights gives it.
model_weights load_model_weight_shard(const tensor_store& store, const model_config& cfg, const shard_shape& shard);

// Element conversions. f16/bf16 -> f32 are exact (subnormals, infinities and NaN
// payloads included); f32 -> f16/bf16 round to nearest, ties to even (writers, tests).
float f16_to_f32(uint16_t bits) noexcept;
float bf16_to_f32(uint16_t bits) noexcept;
uint16_t f32_to_f16(float value) noexcept;
uint16_t f32_to_bf16(float value) noexcept;
// FP8 e4m3fn (1 sign, 4 exponent bits of bias 7, 3 mantissa bits; no infinities, S.1111.111 is
// NaN): exact in fp32.
float fp8_e4m3_to_f32(uint8_t bits) noexcept;

// An F32, F16 or BF16 tensor as fp32, in the same element order (model_error for another dtype).
std::vector<float> to_f32(const tensor_view& tensor);

} // namespace troupe::runtime
