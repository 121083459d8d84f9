// The tensors of a Llama-family model, named and shaped as HF stores them, with the block of
// each that a tensor-parallel rank keeps. Phi-3's fused qkv_proj and gate_up_proj are planned once
// per part (the same stored tensor, another row range); Gemma adds two norms around each MLP; a
// mixture-of-experts layer plans each expert's parts into its place among the experts.
#include "runtime/weight_plan.hpp"

#include <utility>

namespace troupe::runtime {

std::size_t planned_tensor::whole_columns() const noexcept {
  return shape.size() >= 2 ? static_cast<std::size_t>(shape.back()) : 1;
}

std::size_t planned_tensor::whole_rows() const noexcept {
  return static_cast<std::size_t>(shape.size() == 3 ? shape[1] : shape[0]);
}

expert_layout find_expert_layout(const tensor_store& store, const model_config& model) {
  expert_layout layout;
  const bool mixtral = model.model_type == "mixtral";
  const std::string layer = "model.layers.0.";
  // Mixtral 4.x keeps its experts under block_sparse_moe.; everything else (Mixtral 5.x too) under mlp.
  const bool block_sparse =
      store.contains(layer + "block_sparse_moe.gate.weight") || (!store.contains(layer + "mlp.gate.weight") && mixtral);
  layout.prefix = block_sparse ? "block_sparse_moe." : "mlp.";
  const std::string p = layer + layout.prefix + "experts.";
  for (const char* suffix : {"", ".weight"})
    if (store.contains(p + "gate_up_proj" + suffix)) {
      layout.suffix = suffix;
      return layout;
    }
  layout.fused = false;
  if (store.contains(p + "0.gate_proj.weight") || (!store.contains(p + "0.w1.weight") && !mixtral)) {
    layout.gate = "gate_proj";
    layout.up = "up_proj";
    layout.down = "down_proj";
  }
  return layout;
}

std::vector<planned_tensor> plan_weights(const model_config& model, const shard_shape& shard, model_weights& weights,
                                         const expert_layout& experts) {
  const int64_t hidden = model.hidden_size;
  const int64_t q_width = int64_t{model.num_attention_heads} * model.head_dim;
  const int64_t kv_width = int64_t{model.num_key_value_heads} * model.head_dim;
  const int64_t inter = model.intermediate_size;
  const int64_t vocab = model.vocab_size;
  const std::size_t hd = model.head_dim;
  const std::size_t q_begin = shard.q_head_begin * hd, q_rows = shard.q_heads * hd;
  const std::size_t kv_begin = shard.kv_head_begin * hd, kv_rows = shard.kv_heads * hd;

  using role = planned_tensor::role;
  std::vector<planned_tensor> plan;
  // Rows [begin, + count), every column: how column-parallel layers are cut.
  const auto rows = [&](std::string name, std::vector<int64_t> shape, role kind, std::size_t begin, std::size_t count,
                        std::vector<float>& destination) {
    planned_tensor t{std::move(name), std::move(shape), kind, begin, count, 0, 0, &destination};
    t.columns = t.whole_columns();
    plan.push_back(std::move(t));
  };
  // Every row, columns [begin, + count): how row-parallel layers are cut.
  const auto columns = [&](std::string name, std::vector<int64_t> shape, std::size_t begin, std::size_t count,
                           std::vector<float>& destination) {
    const auto all_rows = static_cast<std::size_t>(shape[0]);
    plan.push_back({std::move(name), std::move(shape), role::matrix, 0, all_rows, begin, count, &destination});
  };
  // Not sharded: every rank keeps it all.
  const auto whole = [&](std::string name, std::vector<int64_t> shape, role kind, std::vector<float>& destination) {
    const auto all_rows = static_cast<std::size_t>(shape[0]);
    rows(std::move(name), std::move(shape), kind, 0, all_rows, destination);
  };
  // A linear layer just planned: where its FP8 scales or INT4 groups go, if the checkpoint has them.
  const auto quantized_forms = [&](fp8_scales& fp8, int4_groups& int4) {
    plan.back().fp8 = &fp8;
    plan.back().int4 = &int4;
  };

  // A mixture-of-experts MLP under `p` (model.layers.N.mlp. or .block_sparse_moe.): the router and the shared
  // expert's gate whole, each expert's rows [expert_intermediate_begin, + expert_intermediate) of gate and of
  // up and the matching columns of down, stored per expert as layer_weights holds them ([experts, 2 * I, hidden]
  // and [experts, hidden, I]); Qwen2-MoE's shared expert as the dense MLP is cut.
  const auto plan_experts = [&](const std::string& p, layer_weights& layer) {
    const int64_t experts_count = model.moe->num_experts, expert_inter = model.moe->expert_intermediate_size;
    const std::size_t begin = shard.expert_intermediate_begin, count = shard.expert_intermediate;
    const auto h = static_cast<std::size_t>(hidden);
    whole(p + "gate.weight", {experts_count, hidden}, role::matrix, layer.router);
    for (int64_t e = 0; e < experts_count; ++e) {
      const auto expert = static_cast<std::size_t>(e);
      const std::size_t gate_at = expert * 2 * count * h, up_at = gate_at + count * h, down_at = expert * h * count;
      if (experts.fused) {
        const std::string gate_up = p + "experts.gate_up_proj" + experts.suffix;
        const std::vector<int64_t> shape{experts_count, 2 * expert_inter, hidden};
        rows(gate_up, shape, role::matrix, begin, count, layer.experts_gate_up);
        plan.back().matrix = expert;
        plan.back().offset = gate_at;
        rows(gate_up, shape, role::matrix, static_cast<std::size_t>(expert_inter) + begin, count,
             layer.experts_gate_up);
        plan.back().matrix = expert;
        plan.back().offset = up_at;
        const std::vector<int64_t> down_shape{experts_count, hidden, expert_inter};
        plan.push_back({p + "experts.down_proj" + experts.suffix, down_shape, role::matrix, 0, h, begin, count,
                        &layer.experts_down});
        plan.back().matrix = expert;
        plan.back().offset = down_at;
        continue;
      }
      const std::string q = p + "experts." + std::to_string(e) + ".";
      rows(q + experts.gate + ".weight", {expert_inter, hidden}, role::matrix, begin, count, layer.experts_gate_up);
      plan.back().offset = gate_at;
      rows(q + experts.up + ".weight", {expert_inter, hidden}, role::matrix, begin, count, layer.experts_gate_up);
      plan.back().offset = up_at;
      columns(q + experts.down + ".weight", {hidden, expert_inter}, begin, count, layer.experts_down);
      plan.back().offset = down_at;
    }
    if (!model.moe->shared_expert)
      return;
    rows(p + "shared_expert.gate_proj.weight", {inter, hidden}, role::matrix, shard.intermediate_begin,
         shard.intermediate, layer.gate_proj);
    rows(p + "shared_expert.up_proj.weight", {inter, hidden}, role::matrix, shard.intermediate_begin,
         shard.intermediate, layer.up_proj);
    columns(p + "shared_expert.down_proj.weight", {hidden, inter}, shard.intermediate_begin, shard.intermediate,
            layer.down_proj);
    whole(p + "shared_expert_gate.weight", {1, hidden}, role::matrix, layer.shared_expert_gate);
  };

  // Sized up front: the plan holds pointers into these vectors.
  weights.layers.resize(static_cast<std::size_t>(model.num_hidden_layers));
  whole("model.embed_tokens.weight", {vocab, hidden}, role::matrix, weights.embed_tokens);
  whole("model.norm.weight", {hidden}, role::norm, weights.final_norm);
  if (!model.tie_word_embeddings)
    rows("lm_head.weight", {vocab, hidden}, role::matrix, shard.vocab_begin, shard.vocab, weights.lm_head);
  for (int i = 0; i < model.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    layer_weights& layer = weights.layers[static_cast<std::size_t>(i)];
    whole(p + "input_layernorm.weight", {hidden}, role::norm, layer.input_norm);
    if (model.fused_projections) { // Phi-3: q, k and v are row ranges of one stored tensor
      const std::string qkv = p + "self_attn.qkv_proj.weight";
      const std::vector<int64_t> shape{q_width + 2 * kv_width, hidden};
      const auto q_end = static_cast<std::size_t>(q_width), k_end = q_end + static_cast<std::size_t>(kv_width);
      rows(qkv, shape, role::matrix, q_begin, q_rows, layer.q_proj);
      rows(qkv, shape, role::matrix, q_end + kv_begin, kv_rows, layer.k_proj);
      rows(qkv, shape, role::matrix, k_end + kv_begin, kv_rows, layer.v_proj);
    } else {
      rows(p + "self_attn.q_proj.weight", {q_width, hidden}, role::matrix, q_begin, q_rows, layer.q_proj);
      quantized_forms(layer.q_proj_fp8, layer.q_proj_int4);
      rows(p + "self_attn.k_proj.weight", {kv_width, hidden}, role::matrix, kv_begin, kv_rows, layer.k_proj);
      quantized_forms(layer.k_proj_fp8, layer.k_proj_int4);
      rows(p + "self_attn.v_proj.weight", {kv_width, hidden}, role::matrix, kv_begin, kv_rows, layer.v_proj);
      quantized_forms(layer.v_proj_fp8, layer.v_proj_int4);
    }
    if (model.attention_bias) {
      rows(p + "self_attn.q_proj.bias", {q_width}, role::bias, q_begin, q_rows, layer.q_bias);
      rows(p + "self_attn.k_proj.bias", {kv_width}, role::bias, kv_begin, kv_rows, layer.k_bias);
      rows(p + "self_attn.v_proj.bias", {kv_width}, role::bias, kv_begin, kv_rows, layer.v_bias);
    }
    if (model.qk_norm) { // one [head_dim] vector for every head: whole in every rank
      whole(p + "self_attn.q_norm.weight", {int64_t{model.head_dim}}, role::norm, layer.q_norm);
      whole(p + "self_attn.k_norm.weight", {int64_t{model.head_dim}}, role::norm, layer.k_norm);
    }
    columns(p + "self_attn.o_proj.weight", {hidden, q_width}, q_begin, q_rows, layer.o_proj);
    quantized_forms(layer.o_proj_fp8, layer.o_proj_int4);
    whole(p + "post_attention_layernorm.weight", {hidden}, role::norm, layer.post_attention_norm);
    if (model.sandwich_norms) { // Gemma: the MLP between its own pre- and post-norm
      whole(p + "pre_feedforward_layernorm.weight", {hidden}, role::norm, layer.pre_feedforward_norm);
      whole(p + "post_feedforward_layernorm.weight", {hidden}, role::norm, layer.post_feedforward_norm);
    }
    if (model.moe) {
      plan_experts(p + experts.prefix, layer);
      continue;
    }
    if (model.fused_projections) { // Phi-3: gate rows, then up rows, in one stored tensor
      const std::string gate_up = p + "mlp.gate_up_proj.weight";
      const std::vector<int64_t> shape{2 * inter, hidden};
      rows(gate_up, shape, role::matrix, shard.intermediate_begin, shard.intermediate, layer.gate_proj);
      rows(gate_up, shape, role::matrix, static_cast<std::size_t>(inter) + shard.intermediate_begin, shard.intermediate,
           layer.up_proj);
    } else {
      rows(p + "mlp.gate_proj.weight", {inter, hidden}, role::matrix, shard.intermediate_begin, shard.intermediate,
           layer.gate_proj);
      quantized_forms(layer.gate_proj_fp8, layer.gate_proj_int4);
      rows(p + "mlp.up_proj.weight", {inter, hidden}, role::matrix, shard.intermediate_begin, shard.intermediate,
           layer.up_proj);
      quantized_forms(layer.up_proj_fp8, layer.up_proj_int4);
    }
    columns(p + "mlp.down_proj.weight", {hidden, inter}, shard.intermediate_begin, shard.intermediate, layer.down_proj);
    quantized_forms(layer.down_proj_fp8, layer.down_proj_int4);
  }
  return plan;
}

void keep_tied_lm_head_rows(model_weights& weights, const model_config& model, const shard_shape& shard) {
  if (!model.tie_word_embeddings)
    return;
  const std::size_t hidden = model.hidden_size;
  const auto first = weights.embed_tokens.begin() + static_cast<std::ptrdiff_t>(shard.vocab_begin * hidden);
  weights.lm_head.assign(first, first + static_cast<std::ptrdiff_t>(shard.vocab * hidden));
}

} // namespace troupe::runtime
