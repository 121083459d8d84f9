// Slicing a model's weights for one tensor-parallel rank.
#include "runtime/weight_shard.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace troupe::runtime {

namespace {

// Rows [begin, begin + count) of a row-major [rows, columns] matrix.
std::vector<float> row_slice(std::span<const float> matrix, std::size_t columns, std::size_t begin, std::size_t count) {
  const auto first = matrix.begin() + static_cast<std::ptrdiff_t>(begin * columns);
  return {first, first + static_cast<std::ptrdiff_t>(count * columns)};
}

// Columns [begin, begin + count) of a row-major [rows, columns] matrix, as [rows, count].
std::vector<float> column_slice(std::span<const float> matrix, std::size_t columns, std::size_t begin,
                                std::size_t count) {
  const std::size_t rows = columns == 0 ? 0 : matrix.size() / columns;
  std::vector<float> out(rows * count);
  for (std::size_t r = 0; r < rows; ++r)
    std::copy_n(matrix.begin() + static_cast<std::ptrdiff_t>(r * columns + begin), count, out.begin() + r * count);
  return out;
}

void expect_size(std::span<const float> tensor, std::size_t expected, const std::string& name) {
  if (tensor.size() != expected)
    throw std::invalid_argument("model weights: " + name + " has " + std::to_string(tensor.size()) +
                                " elements, expected " + std::to_string(expected));
}

// Checks the tensors of a model (or of a shard) with these sizes: `heads`, `kv_heads`,
// `inter`, `expert_inter` and `vocab` are the whole model's or the shard's.
void check_sizes(const model_weights& w, const model_config& model, int heads, int kv_heads, int inter,
                 int expert_inter, int vocab) {
  const std::size_t hidden = model.hidden_size, hd = model.head_dim;
  const std::size_t experts = model.moe ? model.moe->num_experts : 0;
  const bool shared_gate = model.moe && model.moe->shared_expert;
  const std::size_t q_rows = heads * hd, kv_rows = kv_heads * hd;
  expect_size(w.embed_tokens, static_cast<std::size_t>(model.vocab_size) * hidden, "embed_tokens");
  expect_size(w.final_norm, hidden, "final_norm");
  expect_size(w.output_projection(), static_cast<std::size_t>(vocab) * hidden, "the output projection");
  if (w.layers.size() != static_cast<std::size_t>(model.num_hidden_layers))
    throw std::invalid_argument("model weights: " + std::to_string(w.layers.size()) + " layers, expected " +
                                std::to_string(model.num_hidden_layers));
  for (std::size_t l = 0; l < w.layers.size(); ++l) {
    const auto& layer = w.layers[l];
    const auto name = [&](const char* tensor) { return "layers." + std::to_string(l) + "." + tensor; };
    expect_size(layer.input_norm, hidden, name("input_norm"));
    expect_size(layer.q_proj, q_rows * hidden, name("q_proj"));
    expect_size(layer.k_proj, kv_rows * hidden, name("k_proj"));
    expect_size(layer.v_proj, kv_rows * hidden, name("v_proj"));
    expect_size(layer.q_bias, model.attention_bias ? q_rows : 0, name("q_bias"));
    expect_size(layer.k_bias, model.attention_bias ? kv_rows : 0, name("k_bias"));
    expect_size(layer.v_bias, model.attention_bias ? kv_rows : 0, name("v_bias"));
    expect_size(layer.q_norm, model.qk_norm ? hd : 0, name("q_norm"));
    expect_size(layer.k_norm, model.qk_norm ? hd : 0, name("k_norm"));
    expect_size(layer.o_proj, hidden * q_rows, name("o_proj"));
    expect_size(layer.post_attention_norm, hidden, name("post_attention_norm"));
    expect_size(layer.pre_feedforward_norm, model.sandwich_norms ? hidden : 0, name("pre_feedforward_norm"));
    expect_size(layer.post_feedforward_norm, model.sandwich_norms ? hidden : 0, name("post_feedforward_norm"));
    expect_size(layer.gate_proj, static_cast<std::size_t>(inter) * hidden, name("gate_proj"));
    expect_size(layer.up_proj, static_cast<std::size_t>(inter) * hidden, name("up_proj"));
    expect_size(layer.down_proj, hidden * inter, name("down_proj"));
    expect_size(layer.router, experts * hidden, name("router"));
    expect_size(layer.experts_gate_up, experts * 2 * expert_inter * hidden, name("experts_gate_up"));
    expect_size(layer.experts_down, experts * hidden * expert_inter, name("experts_down"));
    expect_size(layer.shared_expert_gate, shared_gate ? hidden : 0, name("shared_expert_gate"));
  }
}

} // namespace

void check_shard_weights(const model_weights& weights, const model_config& model, const shard_shape& shard) {
  check_sizes(weights, model, shard.q_heads, shard.kv_heads, shard.intermediate, shard.expert_intermediate,
              shard.vocab);
}

model_weights shard_weights(const model_weights& full, const model_config& model, const shard_shape& shard) {
  const int all_expert_inter = model.moe ? model.moe->expert_intermediate_size : 0;
  check_sizes(full, model, model.num_attention_heads, model.num_key_value_heads, model.intermediate_size,
              all_expert_inter, model.vocab_size);
  const std::size_t hidden = model.hidden_size, hd = model.head_dim;
  const std::size_t q_begin = shard.q_head_begin * hd, q_rows = shard.q_heads * hd;
  const std::size_t kv_begin = shard.kv_head_begin * hd, kv_rows = shard.kv_heads * hd;
  const std::size_t inter_begin = shard.intermediate_begin, inter = shard.intermediate;
  const std::size_t all_q_rows = static_cast<std::size_t>(model.num_attention_heads) * hd;
  const std::size_t all_inter = model.intermediate_size;

  // Each expert's rows [expert_intermediate_begin, + expert_intermediate) of its gate and of its up, and
  // the same columns of its down.
  const std::size_t experts = model.moe ? model.moe->num_experts : 0, whole_expert = all_expert_inter;
  const std::size_t expert_begin = shard.expert_intermediate_begin, expert_inter = shard.expert_intermediate;
  const auto shard_experts = [&](const layer_weights& layer, layer_weights& s) {
    for (std::size_t e = 0; e < experts; ++e) {
      const std::span<const float> gate_up(layer.experts_gate_up.data() + e * 2 * whole_expert * hidden,
                                           2 * whole_expert * hidden);
      for (const std::size_t part_begin : {expert_begin, whole_expert + expert_begin}) {
        const std::vector<float> part = row_slice(gate_up, hidden, part_begin, expert_inter);
        s.experts_gate_up.insert(s.experts_gate_up.end(), part.begin(), part.end());
      }
      const std::span<const float> down(layer.experts_down.data() + e * hidden * whole_expert, hidden * whole_expert);
      const std::vector<float> part = column_slice(down, whole_expert, expert_begin, expert_inter);
      s.experts_down.insert(s.experts_down.end(), part.begin(), part.end());
    }
  };

  model_weights out;
  out.embed_tokens = full.embed_tokens;
  out.final_norm = full.final_norm;
  out.lm_head = row_slice(full.output_projection(), hidden, shard.vocab_begin, shard.vocab);
  for (const auto& layer : full.layers) {
    // A bias is a [rows, 1] matrix: sliced by the same rows as its weight (empty stays empty).
    const auto bias_slice = [](const std::vector<float>& bias, std::size_t begin, std::size_t count) {
      return bias.empty() ? std::vector<float>{} : row_slice(bias, 1, begin, count);
    };
    layer_weights s;
    s.input_norm = layer.input_norm;
    s.q_proj = row_slice(layer.q_proj, hidden, q_begin, q_rows);
    s.k_proj = row_slice(layer.k_proj, hidden, kv_begin, kv_rows);
    s.v_proj = row_slice(layer.v_proj, hidden, kv_begin, kv_rows);
    s.q_bias = bias_slice(layer.q_bias, q_begin, q_rows);
    s.k_bias = bias_slice(layer.k_bias, kv_begin, kv_rows);
    s.v_bias = bias_slice(layer.v_bias, kv_begin, kv_rows);
    s.q_norm = layer.q_norm; // shared by every head: whole in every rank
    s.k_norm = layer.k_norm;
    s.o_proj = column_slice(layer.o_proj, all_q_rows, q_begin, q_rows);
    s.post_attention_norm = layer.post_attention_norm;
    s.pre_feedforward_norm = layer.pre_feedforward_norm;
    s.post_feedforward_norm = layer.post_feedforward_norm;
    s.gate_proj = row_slice(layer.gate_proj, hidden, inter_begin, inter);
    s.up_proj = row_slice(layer.up_proj, hidden, inter_begin, inter);
    s.down_proj = column_slice(layer.down_proj, all_inter, inter_begin, inter);
    s.router = layer.router; // routing must be the same on every rank: whole
    s.shared_expert_gate = layer.shared_expert_gate;
    shard_experts(layer, s);
    out.layers.push_back(std::move(s));
  }
  return out;
}

} // namespace troupe::runtime
