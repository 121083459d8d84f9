// Tiny random mixture-of-experts checkpoints (Mixtral, Qwen2-MoE with its shared expert, Qwen3-MoE)
// written by tests as config.json + model.safetensors in any of the expert layouts transformers
// writes, and the textbook forward pass of such a model (plain loops, in double) to check runners against.
#pragma once

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "runtime/model_weights.hpp"
#include "runtime/safetensors.hpp"

namespace troupe::testing {

// The model's numbers; the family decides attention's extras (Qwen2-MoE: q/k/v biases and a shared
// expert; Qwen3-MoE: q/k norms) and whether the top-k weights are renormalized.
struct moe_shape {
  std::string model_type = "mixtral"; // mixtral | qwen2_moe | qwen3_moe
  int hidden = 32, heads = 4, kv_heads = 2, head_dim = 8, layers = 2, vocab = 97;
  int experts = 8, top_k = 2, expert_inter = 24;
  int shared_inter = 0; // qwen2_moe: the shared expert's rows
  bool normalize = true;
  double theta = 10000.0, eps = 1e-6;

  bool qwen2() const { return model_type == "qwen2_moe"; }
  bool qwen3() const { return model_type == "qwen3_moe"; }
};

inline moe_shape tiny_mixtral() {
  return {};
}
inline moe_shape tiny_qwen2_moe() {
  moe_shape s;
  s.model_type = "qwen2_moe";
  s.top_k = 4;
  s.shared_inter = 40;
  s.normalize = false;
  return s;
}
inline moe_shape tiny_qwen3_moe() {
  moe_shape s;
  s.model_type = "qwen3_moe";
  s.experts = 16;
  s.top_k = 4;
  s.expert_inter = 16;
  return s;
}

// How the experts are stored (see runtime/weight_plan.hpp's expert_layout).
enum class expert_storage {
  mixtral_v4,         // block_sparse_moe.experts.E.w1 / w3 / w2.weight
  qwen_v4,            // mlp.experts.E.gate_proj / up_proj / down_proj.weight
  fused,              // mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I]
  fused_weight_suffix // the same with ".weight"
};

struct moe_layer_values {
  std::vector<float> input_norm, q, k, v, q_bias, k_bias, v_bias, q_norm, k_norm, o, post_norm, router;
  std::vector<std::vector<float>> gate, up, down; // per expert: [I, H], [I, H], [H, I]
  std::vector<float> shared_gate, shared_up, shared_down, shared_expert_gate;
};

struct moe_model {
  moe_shape shape;
  std::vector<float> embed, final_norm, lm_head;
  std::vector<moe_layer_values> layers;
};

inline moe_model random_moe(const moe_shape& s, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto draw = [&](std::size_t n, float scale, float offset = 0.0f) {
    std::vector<float> v(n);
    for (float& x : v)
      x = offset + scale * normal(rng);
    return v;
  };
  const std::size_t h = s.hidden, q = std::size_t(s.heads) * s.head_dim, kv = std::size_t(s.kv_heads) * s.head_dim;
  const std::size_t i = s.expert_inter, si = s.shared_inter;
  moe_model m{s, draw(std::size_t(s.vocab) * h, 1.0f), draw(h, 0.2f, 1.0f), draw(std::size_t(s.vocab) * h, 0.2f), {}};
  for (int l = 0; l < s.layers; ++l) {
    moe_layer_values L;
    L.input_norm = draw(h, 0.2f, 1.0f);
    L.q = draw(q * h, 0.2f);
    L.k = draw(kv * h, 0.2f);
    L.v = draw(kv * h, 0.2f);
    if (s.qwen2()) {
      L.q_bias = draw(q, 0.3f);
      L.k_bias = draw(kv, 0.3f);
      L.v_bias = draw(kv, 0.3f);
    }
    if (s.qwen3()) {
      L.q_norm = draw(std::size_t(s.head_dim), 0.3f, 1.0f);
      L.k_norm = draw(std::size_t(s.head_dim), 0.3f, 1.0f);
    }
    L.o = draw(h * q, 0.15f);
    L.post_norm = draw(h, 0.2f, 1.0f);
    L.router = draw(std::size_t(s.experts) * h, 0.5f); // spread enough that routing differs token to token
    for (int e = 0; e < s.experts; ++e) {
      L.gate.push_back(draw(i * h, 0.2f));
      L.up.push_back(draw(i * h, 0.2f));
      L.down.push_back(draw(h * i, 0.2f));
    }
    if (s.qwen2()) {
      L.shared_gate = draw(si * h, 0.2f);
      L.shared_up = draw(si * h, 0.2f);
      L.shared_down = draw(h * si, 0.15f);
      L.shared_expert_gate = draw(h, 0.3f);
    }
    m.layers.push_back(std::move(L));
  }
  return m;
}

inline boost::json::object moe_config_json(const moe_shape& s) {
  boost::json::object c{{"hidden_size", s.hidden},        {"num_hidden_layers", s.layers},
                        {"num_attention_heads", s.heads}, {"num_key_value_heads", s.kv_heads},
                        {"head_dim", s.head_dim},         {"vocab_size", s.vocab},
                        {"max_position_embeddings", 256}, {"rms_norm_eps", s.eps},
                        {"rope_theta", s.theta},          {"hidden_act", "silu"},
                        {"tie_word_embeddings", false},   {"torch_dtype", "float32"},
                        {"num_experts_per_tok", s.top_k}};
  if (s.model_type == "mixtral") {
    c["architectures"] = boost::json::array{"MixtralForCausalLM"};
    c["model_type"] = "mixtral";
    c["intermediate_size"] = s.expert_inter;
    c["num_local_experts"] = s.experts;
    c["sliding_window"] = nullptr;
    return c;
  }
  c["architectures"] = boost::json::array{s.qwen2() ? "Qwen2MoeForCausalLM" : "Qwen3MoeForCausalLM"};
  c["model_type"] = s.model_type;
  c["intermediate_size"] = 4 * s.hidden; // a dense layer's, unused: every layer is a mixture
  c["moe_intermediate_size"] = s.expert_inter;
  c["num_experts"] = s.experts;
  c["norm_topk_prob"] = s.normalize;
  c["decoder_sparse_step"] = 1;
  c["mlp_only_layers"] = boost::json::array{};
  c["use_sliding_window"] = false;
  c["sliding_window"] = nullptr;
  if (s.qwen2())
    c["shared_expert_intermediate_size"] = s.shared_inter;
  else
    c["attention_bias"] = false;
  return c;
}

// One stored F32 tensor.
struct stored_tensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};

// The checkpoint's tensors, experts stored as `storage` says.
inline std::vector<stored_tensor> moe_tensors(const moe_model& m, expert_storage storage) {
  const moe_shape& s = m.shape;
  const std::int64_t h = s.hidden, q = std::int64_t{s.heads} * s.head_dim, kv = std::int64_t{s.kv_heads} * s.head_dim;
  const std::int64_t i = s.expert_inter, si = s.shared_inter, experts = s.experts;
  std::vector<stored_tensor> t{{"model.embed_tokens.weight", {s.vocab, h}, m.embed},
                               {"model.norm.weight", {h}, m.final_norm},
                               {"lm_head.weight", {s.vocab, h}, m.lm_head}};
  for (int l = 0; l < s.layers; ++l) {
    const moe_layer_values& L = m.layers[static_cast<std::size_t>(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", {h}, L.input_norm});
    t.push_back({p + "self_attn.q_proj.weight", {q, h}, L.q});
    t.push_back({p + "self_attn.k_proj.weight", {kv, h}, L.k});
    t.push_back({p + "self_attn.v_proj.weight", {kv, h}, L.v});
    if (s.qwen2()) {
      t.push_back({p + "self_attn.q_proj.bias", {q}, L.q_bias});
      t.push_back({p + "self_attn.k_proj.bias", {kv}, L.k_bias});
      t.push_back({p + "self_attn.v_proj.bias", {kv}, L.v_bias});
    }
    if (s.qwen3()) {
      t.push_back({p + "self_attn.q_norm.weight", {s.head_dim}, L.q_norm});
      t.push_back({p + "self_attn.k_norm.weight", {s.head_dim}, L.k_norm});
    }
    t.push_back({p + "self_attn.o_proj.weight", {h, q}, L.o});
    t.push_back({p + "post_attention_layernorm.weight", {h}, L.post_norm});
    const std::string moe = p + (storage == expert_storage::mixtral_v4 ? "block_sparse_moe." : "mlp.");
    t.push_back({moe + "gate.weight", {experts, h}, L.router});
    if (storage == expert_storage::fused || storage == expert_storage::fused_weight_suffix) {
      const std::string suffix = storage == expert_storage::fused ? "" : ".weight";
      stored_tensor gate_up{moe + "experts.gate_up_proj" + suffix, {experts, 2 * i, h}, {}};
      stored_tensor down{moe + "experts.down_proj" + suffix, {experts, h, i}, {}};
      for (int e = 0; e < s.experts; ++e) {
        gate_up.values.insert(gate_up.values.end(), L.gate[e].begin(), L.gate[e].end());
        gate_up.values.insert(gate_up.values.end(), L.up[e].begin(), L.up[e].end());
        down.values.insert(down.values.end(), L.down[e].begin(), L.down[e].end());
      }
      t.push_back(std::move(gate_up));
      t.push_back(std::move(down));
    } else {
      const bool mixtral = storage == expert_storage::mixtral_v4;
      for (int e = 0; e < s.experts; ++e) {
        const std::string x = moe + "experts." + std::to_string(e) + ".";
        t.push_back({x + (mixtral ? "w1" : "gate_proj") + ".weight", {i, h}, L.gate[e]});
        t.push_back({x + (mixtral ? "w3" : "up_proj") + ".weight", {i, h}, L.up[e]});
        t.push_back({x + (mixtral ? "w2" : "down_proj") + ".weight", {h, i}, L.down[e]});
      }
    }
    if (s.qwen2()) {
      t.push_back({moe + "shared_expert.gate_proj.weight", {si, h}, L.shared_gate});
      t.push_back({moe + "shared_expert.up_proj.weight", {si, h}, L.shared_up});
      t.push_back({moe + "shared_expert.down_proj.weight", {h, si}, L.shared_down});
      t.push_back({moe + "shared_expert_gate.weight", {1, h}, L.shared_expert_gate});
    }
  }
  return t;
}

// Writes config.json and model.safetensors, every tensor F32 or (rounded to nearest even) BF16.
inline void write_moe_checkpoint(const std::filesystem::path& dir, const std::vector<stored_tensor>& tensors,
                                 const boost::json::object& config,
                                 runtime::weight_dtype dtype = runtime::weight_dtype::f32) {
  std::ofstream(dir / "config.json") << boost::json::serialize(config);
  std::vector<std::vector<std::byte>> bytes;
  bytes.reserve(tensors.size());
  std::vector<runtime::tensor_view> views;
  for (const stored_tensor& t : tensors) {
    std::vector<std::byte> b;
    if (dtype == runtime::weight_dtype::bf16) {
      b.resize(t.values.size() * 2);
      for (std::size_t i = 0; i < t.values.size(); ++i) {
        const std::uint16_t bits = runtime::f32_to_bf16(t.values[i]);
        std::memcpy(b.data() + 2 * i, &bits, 2);
      }
    } else {
      b.resize(t.values.size() * 4);
      std::memcpy(b.data(), t.values.data(), b.size());
    }
    bytes.push_back(std::move(b));
    views.push_back({t.name, dtype, t.shape, bytes.back()});
  }
  runtime::write_safetensors(dir / "model.safetensors", views);
}

inline void write_moe_checkpoint(const std::filesystem::path& dir, const moe_model& m, expert_storage storage) {
  write_moe_checkpoint(dir, moe_tensors(m, storage), moe_config_json(m.shape));
}

// --- the textbook forward pass: one sequence, every position's logits, in double ----------------

namespace moe_reference {

using vec = std::vector<double>;

inline vec rms_norm(const vec& x, const std::vector<float>& w, double eps) {
  double sum_sq = 0;
  for (double v : x)
    sum_sq += v * v;
  const double inv = 1.0 / std::sqrt(sum_sq / static_cast<double>(x.size()) + eps);
  vec out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    out[i] = x[i] * inv * w[i];
  return out;
}

// y = W x (+ b) for W [out, in] row-major.
inline vec matvec(const std::vector<float>& w, const vec& x, std::size_t out, const std::vector<float>& b = {}) {
  const std::size_t in = x.size();
  vec y(out, 0.0);
  for (std::size_t o = 0; o < out; ++o) {
    for (std::size_t i = 0; i < in; ++i)
      y[o] += double{w[o * in + i]} * x[i];
    if (!b.empty())
      y[o] += b[o];
  }
  return y;
}

inline void rope(double* v, int pos, int head_dim, double theta) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    // fp32 tables as the runners build them.
    const float inv_freq = static_cast<float>(1.0 / std::pow(theta, 2.0 * i / head_dim));
    const double angle = static_cast<float>(static_cast<float>(pos) * inv_freq);
    const double c = std::cos(angle), s = std::sin(angle);
    const double a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}

// down · (silu(gate · x) * (up · x))
inline vec gated_mlp(const std::vector<float>& gate, const std::vector<float>& up, const std::vector<float>& down,
                     std::size_t inter, const vec& x) {
  const vec g = matvec(gate, x, inter), u = matvec(up, x, inter);
  vec act(inter);
  for (std::size_t i = 0; i < inter; ++i)
    act[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
  return matvec(down, act, x.size());
}

// The mixture: softmax over the router's logits, the top_k (ties: the lower expert), renormalized or not,
// their weighted sum, plus the sigmoid-gated shared expert.
inline vec moe_mlp(const moe_shape& s, const moe_layer_values& L, const vec& x) {
  const vec logits = matvec(L.router, x, static_cast<std::size_t>(s.experts));
  const double top = *std::max_element(logits.begin(), logits.end());
  vec p(logits.size());
  double total = 0;
  for (std::size_t e = 0; e < p.size(); ++e)
    total += (p[e] = std::exp(logits[e] - top));
  std::vector<int> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  double kept = 0;
  for (int j = 0; j < s.top_k; ++j)
    kept += p[order[j]] / total;
  vec out(x.size(), 0.0);
  for (int j = 0; j < s.top_k; ++j) {
    const int e = order[j];
    const double weight = p[e] / total / (s.normalize ? kept : 1.0);
    const vec y = gated_mlp(L.gate[e], L.up[e], L.down[e], static_cast<std::size_t>(s.expert_inter), x);
    for (std::size_t c = 0; c < x.size(); ++c)
      out[c] += weight * y[c];
  }
  if (s.qwen2()) {
    double g = 0;
    for (std::size_t c = 0; c < x.size(); ++c)
      g += double{L.shared_expert_gate[c]} * x[c];
    const double scale = 1.0 / (1.0 + std::exp(-g));
    const vec y = gated_mlp(L.shared_gate, L.shared_up, L.shared_down, static_cast<std::size_t>(s.shared_inter), x);
    for (std::size_t c = 0; c < x.size(); ++c)
      out[c] += scale * y[c];
  }
  return out;
}

// [tokens, vocab] logits of the sequence.
inline std::vector<float> logits(const moe_model& m, const std::vector<std::int32_t>& tokens) {
  const moe_shape& s = m.shape;
  const std::size_t n = tokens.size(), H = s.hidden, hd = s.head_dim;
  std::vector<vec> x(n, vec(H));
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t i = 0; i < H; ++i)
      x[t][i] = m.embed[static_cast<std::size_t>(tokens[t]) * H + i];
  for (const moe_layer_values& L : m.layers) {
    std::vector<vec> q(n), k(n), v(n);
    for (std::size_t t = 0; t < n; ++t) {
      const vec h = rms_norm(x[t], L.input_norm, s.eps);
      q[t] = matvec(L.q, h, s.heads * hd, L.q_bias);
      k[t] = matvec(L.k, h, s.kv_heads * hd, L.k_bias);
      v[t] = matvec(L.v, h, s.kv_heads * hd, L.v_bias);
      for (int head = 0; head < s.heads; ++head) {
        double* qh = q[t].data() + head * hd;
        if (s.qwen3()) {
          const vec normed = rms_norm(vec(qh, qh + hd), L.q_norm, s.eps);
          std::copy(normed.begin(), normed.end(), qh);
        }
        rope(qh, static_cast<int>(t), s.head_dim, s.theta);
      }
      for (int head = 0; head < s.kv_heads; ++head) {
        double* kh = k[t].data() + head * hd;
        if (s.qwen3()) {
          const vec normed = rms_norm(vec(kh, kh + hd), L.k_norm, s.eps);
          std::copy(normed.begin(), normed.end(), kh);
        }
        rope(kh, static_cast<int>(t), s.head_dim, s.theta);
      }
    }
    for (std::size_t t = 0; t < n; ++t) {
      vec attn(static_cast<std::size_t>(s.heads) * hd, 0.0);
      for (int head = 0; head < s.heads; ++head) {
        const std::size_t g = static_cast<std::size_t>(head / (s.heads / s.kv_heads));
        vec score(t + 1);
        double top = -1e300;
        for (std::size_t u = 0; u <= t; ++u) {
          double dot = 0;
          for (std::size_t d = 0; d < hd; ++d)
            dot += q[t][head * hd + d] * k[u][g * hd + d];
          score[u] = dot / std::sqrt(static_cast<double>(hd));
          top = std::max(top, score[u]);
        }
        double total = 0;
        for (std::size_t u = 0; u <= t; ++u)
          total += (score[u] = std::exp(score[u] - top));
        for (std::size_t u = 0; u <= t; ++u)
          for (std::size_t d = 0; d < hd; ++d)
            attn[head * hd + d] += score[u] / total * v[u][g * hd + d];
      }
      const vec o = matvec(L.o, attn, H);
      for (std::size_t i = 0; i < H; ++i)
        x[t][i] += o[i];
      const vec mlp = moe_mlp(s, L, rms_norm(x[t], L.post_norm, s.eps));
      for (std::size_t i = 0; i < H; ++i)
        x[t][i] += mlp[i];
    }
  }
  std::vector<float> out(n * static_cast<std::size_t>(s.vocab));
  for (std::size_t t = 0; t < n; ++t) {
    const vec row = matvec(m.lm_head, rms_norm(x[t], m.final_norm, s.eps), static_cast<std::size_t>(s.vocab));
    for (int i = 0; i < s.vocab; ++i)
      out[t * s.vocab + i] = static_cast<float>(row[i]);
  }
  return out;
}

} // namespace moe_reference

} // namespace troupe::testing
