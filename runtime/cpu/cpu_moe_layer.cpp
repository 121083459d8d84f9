// The mixture-of-experts MLP of the CPU runner: router, top-k routing, then each expert once over
// the rows routed to it (gathered, so its weights are read once a step), and the shared expert.
#include "runtime/cpu/cpu_moe_layer.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_kernels.hpp"

namespace troupe::runtime {

namespace kc = kernels::cpu;

namespace {

void grow(std::vector<float>& v, std::size_t n) {
  if (v.size() < n)
    v.resize(n);
}

// act(gate) * up over [rows, 2 * inter] rows of [gate | up].
void activate(const model_config& config, std::span<const float> gate_up, int rows, int inter, std::span<float> out) {
  if (config.activation == mlp_activation::gelu_tanh)
    kc::gelu_tanh_and_mul(gate_up, rows, inter, out);
  else
    kc::silu_and_mul(gate_up, rows, inter, out);
}

} // namespace

void cpu_moe_layer::forward(const model_config& config, const moe_layer_weights& w, std::span<const float> h, int rows,
                            std::span<float> out, kc::thread_pool* pool) {
  const moe_config& moe = *config.moe;
  const int hidden = config.hidden_size, experts = moe.num_experts, top_k = moe.experts_per_token;
  const int inter = w.expert_inter;
  const std::size_t T = static_cast<std::size_t>(rows), H = static_cast<std::size_t>(hidden);
  const std::size_t choices = T * static_cast<std::size_t>(top_k);

  // Routing: the same on every rank (whole router, whole h).
  grow(router_logits_, T * experts);
  grow(route_weights_, choices);
  if (route_ids_.size() < choices)
    route_ids_.resize(choices);
  const auto logits = std::span<float>(router_logits_).first(T * experts);
  const auto ids = std::span<std::int32_t>(route_ids_).first(choices);
  const auto weights = std::span<float>(route_weights_).first(choices);
  kc::linear(h, rows, hidden, w.router, experts, {}, logits, pool);
  kc::moe_route(logits, rows, experts, top_k, moe.normalize_top_k, ids, weights);

  // The slots (token * top_k + choice) of each expert, grouped: a counting sort by expert.
  expert_start_.assign(static_cast<std::size_t>(experts) + 1, 0);
  for (const std::int32_t e : ids)
    ++expert_start_[static_cast<std::size_t>(e) + 1];
  for (int e = 0; e < experts; ++e)
    expert_start_[e + 1] += expert_start_[e];
  // Filled in order of slot: within an expert, its tokens ascending.
  expert_slots_.resize(choices);
  expert_cursor_.assign(expert_start_.begin(), expert_start_.end() - 1);
  for (std::size_t slot = 0; slot < choices; ++slot)
    expert_slots_[static_cast<std::size_t>(expert_cursor_[static_cast<std::size_t>(ids[slot])]++)] =
        static_cast<int>(slot);

  std::fill(out.begin(), out.end(), 0.0f);
  grow(rows_, T * H);
  grow(gate_up_, T * 2 * std::max(inter, w.shared_inter));
  grow(act_, T * std::max(inter, w.shared_inter));
  grow(expert_out_, T * H);
  const std::size_t gate_up_size = 2 * static_cast<std::size_t>(inter) * H, down_size = H * inter;
  for (int e = 0; e < experts; ++e) {
    const int first = expert_start_[e], n = expert_start_[e + 1] - first;
    if (n == 0 || inter == 0)
      continue;
    // Its tokens' rows of h, gathered: [n, hidden]
    for (int i = 0; i < n; ++i) {
      const std::size_t token = static_cast<std::size_t>(expert_slots_[first + i]) / top_k;
      std::copy_n(h.data() + token * H, H, rows_.data() + static_cast<std::size_t>(i) * H);
    }
    const auto x = std::span<const float>(rows_).first(n * H);
    const auto gate_up = std::span<float>(gate_up_).first(static_cast<std::size_t>(n) * 2 * inter);
    const auto act = std::span<float>(act_).first(static_cast<std::size_t>(n) * inter);
    const auto y = std::span<float>(expert_out_).first(n * H);
    kc::linear(x, n, hidden, w.experts_gate_up.subspan(e * gate_up_size, gate_up_size), 2 * inter, {}, gate_up, pool);
    activate(config, gate_up, n, inter, act);
    kc::linear(act, n, inter, w.experts_down.subspan(e * down_size, down_size), hidden, {}, y, pool);
    for (int i = 0; i < n; ++i) {
      const auto slot = static_cast<std::size_t>(expert_slots_[first + i]);
      const float weight = weights[slot];
      float* o = out.data() + slot / top_k * H;
      const float* yi = y.data() + static_cast<std::size_t>(i) * H;
      for (std::size_t c = 0; c < H; ++c)
        o[c] += weight * yi[c];
    }
  }

  if (w.shared_gate_up.empty() || w.shared_inter == 0)
    return;
  // Qwen2-MoE: + sigmoid(shared_expert_gate · h) shared_expert(h), for every token.
  const int si = w.shared_inter;
  const auto gate_up = std::span<float>(gate_up_).first(T * 2 * si);
  const auto act = std::span<float>(act_).first(T * si);
  const auto y = std::span<float>(expert_out_).first(T * H);
  kc::linear(h, rows, hidden, w.shared_gate_up, 2 * si, {}, gate_up, pool);
  activate(config, gate_up, rows, si, act);
  kc::linear(act, rows, si, w.shared_down, hidden, {}, y, pool);
  for (std::size_t t = 0; t < T; ++t) {
    const float* ht = h.data() + t * H;
    float dot = 0.0f;
    for (std::size_t c = 0; c < H; ++c)
      dot += w.shared_expert_gate[c] * ht[c];
    const float scale = 1.0f / (1.0f + std::exp(-dot));
    for (std::size_t c = 0; c < H; ++c)
      out[t * H + c] += scale * y[t * H + c];
  }
}

} // namespace troupe::runtime
