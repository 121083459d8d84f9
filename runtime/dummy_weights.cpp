// Deterministic random weights: one generator, tensors filled in a fixed order.
#include "runtime/dummy_weights.hpp"

#include <random>

namespace troupe::runtime {

model_weights dummy_weights(const model_config& cfg, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  auto matrix = [&](int rows, int cols) {
    std::vector<float> m(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols));
    for (auto& x : m)
      x = normal(rng);
    return m;
  };
  auto ones = [](int n) { return std::vector<float>(static_cast<std::size_t>(n), 1.0f); };
  const int h = cfg.hidden_size, q = cfg.num_attention_heads * cfg.head_dim, kv = cfg.num_key_value_heads * cfg.head_dim;
  model_weights w;
  w.embed_tokens = matrix(cfg.vocab_size, h);
  w.final_norm = ones(h);
  if (!cfg.tie_word_embeddings)
    w.lm_head = matrix(cfg.vocab_size, h);
  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    layer_weights lw;
    lw.input_norm = ones(h);
    lw.q_proj = matrix(q, h);
    lw.k_proj = matrix(kv, h);
    lw.v_proj = matrix(kv, h);
    if (cfg.attention_bias) {
      lw.q_bias.assign(static_cast<std::size_t>(q), 0.0f);
      lw.k_bias.assign(static_cast<std::size_t>(kv), 0.0f);
      lw.v_bias.assign(static_cast<std::size_t>(kv), 0.0f);
    }
    lw.o_proj = matrix(h, q);
    lw.post_attention_norm = ones(h);
    lw.gate_proj = matrix(cfg.intermediate_size, h);
    lw.up_proj = matrix(cfg.intermediate_size, h);
    lw.down_proj = matrix(h, cfg.intermediate_size);
    w.layers.push_back(std::move(lw));
  }
  return w;
}

} // namespace troupe::runtime
