// The runner's weights on the GPU: a checkpoint's, converted to the runner's dtype once, with
// q|k|v and gate|up concatenated along the output rows; or dummy ones made on the device.
#include <initializer_list>
#include <vector>

#include "kernels/cuda/random_fill.hpp"
#include "runtime/cuda/cuda_model_runner.hpp"

namespace troupe::runtime {

namespace kc = kernels::cuda;

namespace {

std::vector<float> concat(std::initializer_list<std::span<const float>> parts) {
  std::vector<float> out;
  for (auto p : parts)
    out.insert(out.end(), p.begin(), p.end());
  return out;
}

} // namespace

std::size_t cuda_model_runner::upload_weights(const model_weights& weights) {
  std::size_t weight_bytes = 0;
  auto put = [&](std::span<const float> v) {
    bytes b = upload(v);
    weight_bytes += b.bytes();
    return b;
  };
  embed_ = put(weights.embed_tokens);
  final_norm_ = put(weights.final_norm);
  // A rank holds its slice of the LM head as lm_head, tied or not (shard_weights).
  if ((!config_.tie_word_embeddings || group_ != nullptr) && !weights.lm_head.empty())
    lm_head_ = put(weights.lm_head);
  for (const auto& w : weights.layers) {
    layer l;
    l.input_norm = put(w.input_norm);
    l.qkv = put(concat({w.q_proj, w.k_proj, w.v_proj}));
    if (config_.attention_bias && !w.q_bias.empty())
      l.qkv_bias = put(concat({w.q_bias, w.k_bias, w.v_bias}));
    if (config_.qk_norm) { // whole in every rank: one vector for all heads
      l.q_norm = put(w.q_norm);
      l.k_norm = put(w.k_norm);
    }
    l.o = put(w.o_proj);
    l.post_norm = put(w.post_attention_norm);
    l.gate_up = put(concat({w.gate_proj, w.up_proj}));
    l.down = put(w.down_proj);
    layers_.push_back(std::move(l));
  }
  return weight_bytes;
}

cuda_model_runner::bytes cuda_model_runner::upload(std::span<const float> values) const {
  bytes b(values.size() * act_bytes_);
  if (values.empty())
    return b;
  if (options_.dtype == cuda_dtype::float32) {
    kc::check(cudaMemcpy(b.data(), values.data(), b.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy (weights)");
  } else {
    const bool f16 = options_.dtype == cuda_dtype::float16;
    std::vector<std::uint16_t> half(values.size());
    for (std::size_t i = 0; i < values.size(); ++i)
      half[i] = f16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
    kc::check(cudaMemcpy(b.data(), half.data(), b.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy (weights)");
  }
  return b;
}

std::size_t cuda_model_runner::make_dummy_weights() {
  // A rank makes its shard's shapes (values drawn afresh, not slices of the whole model's:
  // only the shapes matter to a benchmark).
  const std::size_t hidden = config_.hidden_size, heads = local_.num_attention_heads,
                    kv_heads = local_.num_key_value_heads, hd = config_.head_dim, inter = local_.intermediate_size,
                    vocab = config_.vocab_size;
  const std::size_t qkv_width = (heads + 2 * kv_heads) * hd;
  std::size_t total = 0;
  std::uint64_t tensor = 0; // each tensor draws from its own seed: (dummy_seed, tensor index)
  auto make = [&](std::size_t n, float mean, float std) {
    bytes b(n * act_bytes_);
    const std::uint64_t seed = (options_.dummy_seed << 20) + tensor++;
    const cudaError_t e =
        options_.dtype == cuda_dtype::float32
            ? kc::random_fill(reinterpret_cast<float*>(b.data()), n, seed, mean, std, compute_)
        : options_.dtype == cuda_dtype::float16
            ? kc::random_fill(reinterpret_cast<__half*>(b.data()), n, seed, mean, std, compute_)
            : kc::random_fill(reinterpret_cast<__nv_bfloat16*>(b.data()), n, seed, mean, std, compute_);
    kc::check(e, "random_fill (dummy weights)");
    total += b.bytes();
    return b;
  };
  // The usual Llama init scale; norms of 1 keep the activations' scale layer after layer.
  constexpr float matrix_std = 0.02f;
  embed_ = make(vocab * hidden, 0.0f, matrix_std);
  final_norm_ = make(hidden, 1.0f, 0.0f);
  if (group_ != nullptr)
    lm_head_ = make(static_cast<std::size_t>(shard_.vocab) * hidden, 0.0f, matrix_std);
  else if (!config_.tie_word_embeddings)
    lm_head_ = make(vocab * hidden, 0.0f, matrix_std);
  for (int i = 0; i < config_.num_hidden_layers; ++i) {
    layer l;
    l.input_norm = make(hidden, 1.0f, 0.0f);
    l.qkv = make(qkv_width * hidden, 0.0f, matrix_std);
    if (config_.attention_bias)
      l.qkv_bias = make(qkv_width, 0.0f, 0.0f);
    l.o = make(hidden * heads * hd, 0.0f, matrix_std);
    l.post_norm = make(hidden, 1.0f, 0.0f);
    l.gate_up = make(2 * inter * hidden, 0.0f, matrix_std);
    l.down = make(hidden * inter, 0.0f, matrix_std);
    if (config_.qk_norm) { // drawn last: the other tensors' seeds stay those of a model without
      l.q_norm = make(hd, 1.0f, 0.0f);
      l.k_norm = make(hd, 1.0f, 0.0f);
    }
    layers_.push_back(std::move(l));
  }
  return total;
}

} // namespace troupe::runtime
