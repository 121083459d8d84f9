// The model hyper-parameters troupe needs, parsed and checked from a Hugging Face
// config.json (Llama, Mistral, Qwen2, Qwen3 dense, Phi-3, Gemma 2 and Gemma 3 families, with sliding-window
// layers; the Mixtral, Qwen2-MoE and Qwen3-MoE mixtures of experts).
#pragma once

#include "runtime/quantization_config.hpp"
#include "runtime/safetensors.hpp" // weight_dtype

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::runtime {

enum class rope_scaling_type { none, linear, llama3 };

// HF's rope_scaling: "linear" divides positions by factor; "llama3" rescales the
// low-frequency bands (Llama 3.1+). The llama3 fields are read from the file.
struct rope_scaling {
  rope_scaling_type type = rope_scaling_type::none;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
};

// The MLP's gated activation: act(gate) * up.
enum class mlp_activation {
  silu,     // SwiGLU (Llama and most others)
  gelu_tanh // GeGLU with the tanh approximation of GELU (Gemma's gelu_pytorch_tanh)
};

// Mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE): every layer's MLP is num_experts gated MLPs of
// expert_intermediate_size rows. A router ([num_experts, hidden], no bias) scores the experts per token;
// softmax over all of them (fp32), the experts_per_token most probable run, and their outputs are summed
// weighted by those probabilities, renormalized to sum 1 when normalize_top_k (Mixtral always,
// Qwen's norm_topk_prob). Qwen2-MoE adds a shared expert every token runs: model_config::intermediate_size
// rows, its output scaled by sigmoid(shared_expert_gate · x). Only models whose every layer is a mixture
// of experts are served (Qwen's decoder_sparse_step 1 and no mlp_only_layers), unquantized.
struct moe_config {
  int num_experts = 0;              // Mixtral's num_local_experts, Qwen's num_experts
  int experts_per_token = 0;        // num_experts_per_tok: 1..num_experts
  int expert_intermediate_size = 0; // each expert's rows: Mixtral's intermediate_size, Qwen's moe_intermediate_size
  bool normalize_top_k = true;
  bool shared_expert = false; // Qwen2-MoE

  bool operator==(const moe_config&) const = default;
};

struct model_config {
  std::string architecture; // "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                            // "Phi3ForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM", "MixtralForCausalLM",
                            // "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"
  std::string model_type;   // llama | mistral | qwen2 | qwen3 | phi3 | gemma2 | gemma3_text | mixtral | qwen2_moe |
                            // qwen3_moe
  int hidden_size = 0;
  // The dense MLP's rows; on a mixture-of-experts model the shared expert's (0: none; see moe).
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0; // divides num_attention_heads (GQA group size = heads / kv heads)
  int head_dim = 0;            // may differ from hidden_size / num_attention_heads when given explicitly
  int vocab_size = 0;
  int max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  rope_scaling rope;
  bool tie_word_embeddings = false;
  bool attention_bias = false;                  // q/k/v biases (qwen2: true unless the file says otherwise)
  // Qwen3: each head of q and of k is RMS-normalized (rms_norm_eps, a [head_dim] weight per layer
  // shared by the heads of its kind) after its projection and before RoPE.
  bool qk_norm = false;
  // Phi-3: each layer stores q, k and v as one self_attn.qkv_proj [q + 2 kv rows, hidden] and gate and up as
  // one mlp.gate_up_proj [2 * intermediate, hidden]; the loader reads each part's rows (a rank's too).
  bool fused_projections = false;
  // Sliding-window attention: on the layers marked in sliding_layers ([num_hidden_layers]), the token at
  // position p attends only to positions p - sliding_window + 1 .. p (transformers: kv > q - window).
  // Unset (and sliding_layers empty) when no layer slides.
  std::optional<int> sliding_window;
  std::vector<bool> sliding_layers;
  weight_dtype torch_dtype = weight_dtype::f32; // the checkpoint's declared dtype; weights are converted anyway
  mlp_activation activation = mlp_activation::silu;

  // Gemma 2 / 3. Every RMSNorm (q/k norms too) scales by (norm_weight_offset + weight): Gemma stores
  // its norm weights as offsets from 1. model_weights keeps them as stored; each backend adds this.
  float norm_weight_offset = 0.0f;
  // The embeddings are multiplied by this (Gemma: sqrt(hidden_size), rounded to the activations'
  // dtype as transformers does) before the first layer.
  float embedding_multiplier = 1.0f;
  // Gemma's "sandwich" norms: the attention output and the MLP output are each RMS-normalized
  // (post_attention_norm, post_feedforward_norm) before their residual add, and the MLP input by
  // pre_feedforward_norm; without them post_attention_norm is the MLP's input norm (Llama).
  bool sandwich_norms = false;
  // Gemma: attention scores are q·k / sqrt(query_pre_attn_scalar) (attention_scale()).
  std::optional<float> query_pre_attn_scalar;
  // > 0: scores capped as cap * tanh(score / cap) before the softmax (Gemma 2's attn_logit_softcapping),
  // and the logits as final_logit_softcap * tanh(logit / final_logit_softcap) (final_logit_softcapping).
  float attention_logit_softcap = 0.0f;
  float final_logit_softcap = 0.0f;
  // Gemma 3: the sliding-window layers rotate with this base and no scaling (rope_local_base_freq, or
  // rope_parameters.sliding_attention); the full layers with rope_theta and rope. Unset: one base for all.
  std::optional<float> sliding_rope_theta;
  // Gemma 3's image-text checkpoints (model_type gemma3, Gemma3ForConditionalGeneration): the language model
  // of their text_config, whose tensors sit under a prefix (the loader finds which); the vision tower is
  // left unread, so such a checkpoint serves text.
  bool image_text_checkpoint = false;
  // Set on a mixture-of-experts model: every layer's MLP is experts (see moe_config).
  std::optional<moe_config> moe;
  // quantization_config: how the linear layers are stored, when they are quantized (loading
  // dequantizes them to fp32; the rest of troupe sees an fp32 model).
  std::optional<quantization_config> quantization;

  // The softmax scale of attention scores: 1/sqrt(query_pre_attn_scalar) when set, else 1/sqrt(head_dim).
  float attention_scale() const {
    return 1.0f / std::sqrt(query_pre_attn_scalar ? *query_pre_attn_scalar : static_cast<float>(head_dim));
  }
  // Whether layer `layer` rotates with sliding_rope_theta (a sliding layer of a model that has one).
  bool uses_sliding_rope(int layer) const { return sliding_rope_theta && attention_window(layer) > 0; }

  // Positions a token of layer `layer` attends to at most: sliding_window on a sliding layer, else 0
  // (full causal attention).
  int attention_window(int layer) const {
    return sliding_window && static_cast<std::size_t>(layer) < sliding_layers.size() &&
                   sliding_layers[static_cast<std::size_t>(layer)]
               ? *sliding_window
               : 0;
  }
  // The window when every layer slides (then a sequence's KV before it is never read again), else 0.
  int every_layer_window() const {
    return sliding_window && std::find(sliding_layers.begin(), sliding_layers.end(), false) == sliding_layers.end()
               ? *sliding_window
               : 0;
  }
};

std::string_view to_string(rope_scaling_type type) noexcept;

// Throws model_error "<source_name>: <field> ..." on malformed JSON, a missing required
// field, a wrong JSON type, an out-of-range value or an unsupported feature.
model_config parse_model_config(std::string_view json_text, std::string_view source_name = "config.json");

// Reads and parses model_dir/config.json; errors name that path.
model_config load_model_config(const std::filesystem::path& model_dir);

// The whole file as text; throws model_error naming the path when it cannot be read.
// (Shared by the config loaders in runtime/.)
std::string read_text_file(const std::filesystem::path& path);

} // namespace troupe::runtime
