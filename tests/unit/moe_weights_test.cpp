// Loading mixture-of-experts checkpoints: every way transformers stores the experts (Mixtral 4.x's
// block_sparse_moe.experts.E.w1/w3/w2, Qwen 4.x's experts.E.gate_proj/up_proj/down_proj, transformers 5's
// fused gate_up_proj/down_proj stacks) gives the same layer_weights; missing, misshapen and stray tensors are
// named; a rank's shard read from the file equals the whole model's sliced; dummy weights have the shapes.
#include "runtime/dummy_weights.hpp"
#include "runtime/model_config.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/safetensors.hpp"
#include "runtime/shard_shape.hpp"
#include "runtime/weight_shard.hpp"

#include <doctest/doctest.h>

#include "tests/support/model_error_check.hpp"
#include "tests/support/moe_checkpoint.hpp"
#include "tests/support/temp_dir.hpp"

#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace troupe::runtime;
using namespace troupe::testing;

model_weights load(const fs::path& dir) {
  return load_model_weights(tensor_store::open(dir), load_model_config(dir));
}

// Every tensor of a layer_weights, named, for whole-model comparisons.
std::vector<std::pair<std::string, const std::vector<float>*>> all_vectors(const model_weights& w) {
  std::vector<std::pair<std::string, const std::vector<float>*>> out{
      {"embed_tokens", &w.embed_tokens}, {"final_norm", &w.final_norm}, {"lm_head", &w.lm_head}};
  for (std::size_t l = 0; l < w.layers.size(); ++l) {
    const layer_weights& L = w.layers[l];
    const std::string p = std::to_string(l) + ".";
    for (const auto& [name, v] : std::initializer_list<std::pair<const char*, const std::vector<float>*>>{
             {"input_norm", &L.input_norm},
             {"q_proj", &L.q_proj},
             {"k_proj", &L.k_proj},
             {"v_proj", &L.v_proj},
             {"q_bias", &L.q_bias},
             {"k_bias", &L.k_bias},
             {"v_bias", &L.v_bias},
             {"q_norm", &L.q_norm},
             {"k_norm", &L.k_norm},
             {"o_proj", &L.o_proj},
             {"post_attention_norm", &L.post_attention_norm},
             {"gate_proj", &L.gate_proj},
             {"up_proj", &L.up_proj},
             {"down_proj", &L.down_proj},
             {"router", &L.router},
             {"experts_gate_up", &L.experts_gate_up},
             {"experts_down", &L.experts_down},
             {"shared_expert_gate", &L.shared_expert_gate}})
      out.emplace_back(p + name, v);
  }
  return out;
}

void check_same(const model_weights& a, const model_weights& b) {
  const auto x = all_vectors(a), y = all_vectors(b);
  REQUIRE(x.size() == y.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    INFO(x[i].first);
    CHECK(*x[i].second == *y[i].second);
  }
}

// The layer_weights layout, from the values the checkpoint was made of.
void check_layout(const model_weights& w, const moe_model& m) {
  const moe_shape& s = m.shape;
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    const moe_layer_values& L = m.layers[l];
    const layer_weights& got = w.layers[l];
    CHECK(got.router == L.router);
    std::vector<float> gate_up, down;
    for (int e = 0; e < s.experts; ++e) {
      gate_up.insert(gate_up.end(), L.gate[e].begin(), L.gate[e].end());
      gate_up.insert(gate_up.end(), L.up[e].begin(), L.up[e].end());
      down.insert(down.end(), L.down[e].begin(), L.down[e].end());
    }
    CHECK(got.experts_gate_up == gate_up);
    CHECK(got.experts_down == down);
    CHECK(got.gate_proj == L.shared_gate);
    CHECK(got.up_proj == L.shared_up);
    CHECK(got.down_proj == L.shared_down);
    CHECK(got.shared_expert_gate == L.shared_expert_gate);
  }
}

} // namespace

TEST_CASE("Mixtral experts stored per expert (4.x) or fused (5.x, with or without .weight) load the same") {
  const moe_model m = random_moe(tiny_mixtral(), 7);
  model_weights reference;
  for (const expert_storage storage : {expert_storage::mixtral_v4, expert_storage::qwen_v4, expert_storage::fused,
                                       expert_storage::fused_weight_suffix}) {
    CAPTURE(static_cast<int>(storage));
    temp_dir dir("troupe_moe");
    write_moe_checkpoint(dir.path, m, storage);
    const model_weights w = load(dir.path);
    check_layout(w, m);
    CHECK(w.layers[0].gate_proj.empty()); // no shared expert
    if (storage == expert_storage::mixtral_v4)
      reference = w;
    else
      check_same(w, reference);
  }
}

TEST_CASE("Qwen2-MoE's shared expert and its gate load into gate/up/down_proj and shared_expert_gate, both layouts") {
  const moe_model m = random_moe(tiny_qwen2_moe(), 8);
  temp_dir per_expert("troupe_moe"), fused("troupe_moe");
  write_moe_checkpoint(per_expert.path, m, expert_storage::qwen_v4);
  write_moe_checkpoint(fused.path, m, expert_storage::fused);
  const model_weights a = load(per_expert.path), b = load(fused.path);
  check_layout(a, m);
  CHECK(a.layers[1].q_bias == m.layers[1].q_bias);
  CHECK(a.layers[1].shared_expert_gate.size() == 32u);
  check_same(a, b);
}

TEST_CASE("BF16 fused experts load as their values rounded to BF16, stored per expert in F32") {
  moe_model m = random_moe(tiny_qwen3_moe(), 13);
  temp_dir bf16("troupe_moe"), f32("troupe_moe");
  write_moe_checkpoint(bf16.path, moe_tensors(m, expert_storage::fused), moe_config_json(m.shape), weight_dtype::bf16);
  const auto round = [](std::vector<float>& v) {
    for (float& x : v)
      x = bf16_to_f32(f32_to_bf16(x));
  };
  round(m.embed);
  round(m.final_norm);
  round(m.lm_head);
  for (moe_layer_values& L : m.layers) {
    for (auto* v : {&L.input_norm, &L.q, &L.k, &L.v, &L.q_norm, &L.k_norm, &L.o, &L.post_norm, &L.router})
      round(*v);
    for (auto* experts : {&L.gate, &L.up, &L.down})
      for (std::vector<float>& v : *experts)
        round(v);
  }
  write_moe_checkpoint(f32.path, m, expert_storage::qwen_v4);
  const model_weights a = load(bf16.path);
  check_layout(a, m);
  check_same(a, load(f32.path));
}

TEST_CASE("mixture-of-experts tensors: missing, misshapen and stray ones are named with their file") {
  const moe_model m = random_moe(tiny_mixtral(), 9);
  const auto tensors = moe_tensors(m, expert_storage::mixtral_v4);
  const auto write_edited = [&](const fs::path& dir, auto&& edit) {
    auto edited = tensors;
    edit(edited);
    write_moe_checkpoint(dir, edited, moe_config_json(m.shape));
  };
  const auto erase = [](std::vector<stored_tensor>& t, const std::string& name) {
    const auto it = std::find_if(t.begin(), t.end(), [&](const stored_tensor& x) { return x.name == name; });
    REQUIRE(it != t.end());
    t.erase(it);
  };
  {
    temp_dir dir("troupe_moe");
    write_edited(dir.path, [&](auto& t) { erase(t, "model.layers.1.block_sparse_moe.experts.5.w3.weight"); });
    CHECK_MODEL_ERROR(load(dir.path),
                      dir.path.string() + ": tensor 'model.layers.1.block_sparse_moe.experts.5.w3.weight' is missing");
  }
  {
    temp_dir dir("troupe_moe");
    write_edited(dir.path, [&](auto& t) { erase(t, "model.layers.0.block_sparse_moe.gate.weight"); });
    CHECK_MODEL_ERROR(load(dir.path), "tensor 'model.layers.0.block_sparse_moe.gate.weight' is missing");
  }
  {
    temp_dir dir("troupe_moe");
    write_edited(dir.path, [&](auto& t) {
      for (stored_tensor& x : t)
        if (x.name == "model.layers.1.block_sparse_moe.gate.weight")
          x.shape = {16, 16}; // the same number of values, the wrong shape
    });
    CHECK_MODEL_ERROR(load(dir.path),
                      "model.safetensors: tensor 'model.layers.1.block_sparse_moe.gate.weight' has "
                      "shape [16, 16], expected [8, 32] (from config.json)");
  }
  {
    temp_dir dir("troupe_moe");
    write_edited(dir.path, [&](auto& t) { // a ninth expert config.json does not know of
      t.push_back({"model.layers.0.block_sparse_moe.experts.8.w1.weight", {24, 32}, m.layers[0].gate[0]});
    });
    CHECK_MODEL_ERROR(load(dir.path),
                      "model.safetensors: tensor 'model.layers.0.block_sparse_moe.experts.8.w1.weight' "
                      "is not used by a mixtral model as config.json describes it");
    CHECK_MODEL_ERROR(load(dir.path), "8 experts)");
  }
  {
    temp_dir dir("troupe_moe");
    write_edited(dir.path, [&](auto& t) { // a shared expert on a model that has none
      t.push_back({"model.layers.0.block_sparse_moe.shared_expert_gate.weight", {1, 32}, m.final_norm});
    });
    CHECK_MODEL_ERROR(load(dir.path),
                      "tensor 'model.layers.0.block_sparse_moe.shared_expert_gate.weight' is not "
                      "used by a mixtral model");
  }
  {
    // Both layouts at once: the per-expert tensors are left over.
    temp_dir dir("troupe_moe");
    auto both = moe_tensors(m, expert_storage::fused);
    for (const stored_tensor& x : moe_tensors(m, expert_storage::qwen_v4))
      if (x.name.find(".experts.0.") != std::string::npos)
        both.push_back(x);
    write_moe_checkpoint(dir.path, both, moe_config_json(m.shape));
    CHECK_MODEL_ERROR(load(dir.path), "tensor 'model.layers.0.mlp.experts.0.down_proj.weight' is not used");
  }
  {
    // Qwen2-MoE without its shared expert's gate.
    const moe_model q = random_moe(tiny_qwen2_moe(), 10);
    temp_dir dir("troupe_moe");
    auto t = moe_tensors(q, expert_storage::fused);
    erase(t, "model.layers.1.mlp.shared_expert_gate.weight");
    write_moe_checkpoint(dir.path, t, moe_config_json(q.shape));
    CHECK_MODEL_ERROR(load(dir.path), "tensor 'model.layers.1.mlp.shared_expert_gate.weight' is missing");
  }
}

TEST_CASE("a rank's mixture-of-experts shard read from the file equals the whole model sliced, at 2 and 4 ranks") {
  for (const moe_shape& shape : {tiny_mixtral(), tiny_qwen2_moe(), tiny_qwen3_moe()}) {
    for (const expert_storage storage : {expert_storage::mixtral_v4, expert_storage::fused}) {
      CAPTURE(shape.model_type);
      CAPTURE(static_cast<int>(storage));
      const moe_model m = random_moe(shape, 11);
      temp_dir dir("troupe_moe");
      write_moe_checkpoint(dir.path, m, storage);
      const model_config cfg = load_model_config(dir.path);
      const tensor_store store = tensor_store::open(dir.path);
      const model_weights whole = load_model_weights(store, cfg);
      for (const int ranks : {2, 4})
        for (const shard_shape& s : shard_shapes(cfg, ranks)) {
          const model_weights shard = load_model_weight_shard(store, cfg, s);
          check_same(shard, shard_weights(whole, cfg, s));
          CHECK_NOTHROW(check_shard_weights(shard, cfg, s));
          // Rank r's slice of expert 3: its gate rows, then its up rows, then its down columns.
          const std::size_t h = shape.hidden, i = shape.expert_inter, share = i / static_cast<std::size_t>(ranks);
          const std::size_t begin = static_cast<std::size_t>(s.expert_intermediate_begin);
          CHECK(s.expert_intermediate == static_cast<int>(share));
          const auto& L = m.layers[1];
          const auto* gate_up = shard.layers[1].experts_gate_up.data() + 3 * 2 * share * h;
          CHECK(std::equal(gate_up, gate_up + share * h, L.gate[3].begin() + begin * h));
          CHECK(std::equal(gate_up + share * h, gate_up + 2 * share * h, L.up[3].begin() + begin * h));
          const auto* down = shard.layers[1].experts_down.data() + 3 * h * share;
          for (std::size_t row = 0; row < h; ++row)
            CHECK(std::equal(down + row * share, down + (row + 1) * share, L.down[3].begin() + row * i + begin));
          CHECK(shard.layers[1].router == L.router); // whole on every rank
          CHECK(shard.layers[1].shared_expert_gate == L.shared_expert_gate);
        }
    }
  }
}

TEST_CASE("dummy mixture-of-experts weights have the model's shapes, and a rank's are the whole model's sliced") {
  const moe_model m = random_moe(tiny_qwen2_moe(), 12);
  temp_dir dir("troupe_moe");
  write_moe_checkpoint(dir.path, m, expert_storage::fused);
  const model_config cfg = load_model_config(dir.path);
  const model_weights whole = dummy_weights(cfg, 5);
  CHECK_NOTHROW(check_shard_weights(whole, cfg, whole_model_shard(cfg)));
  CHECK(whole.layers[0].experts_gate_up.size() == 8u * 2 * 24 * 32);
  // Every expert drew values of its own.
  CHECK_FALSE(std::equal(whole.layers[0].experts_down.begin(), whole.layers[0].experts_down.begin() + 32 * 24,
                         whole.layers[0].experts_down.begin() + 32 * 24));
  for (const shard_shape& s : shard_shapes(cfg, 2))
    check_same(dummy_weight_shard(cfg, 5, s), shard_weights(whole, cfg, s));
}
