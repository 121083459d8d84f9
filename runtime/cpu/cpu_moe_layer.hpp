// A mixture-of-experts MLP on the CPU (Mixtral, Qwen2-MoE, Qwen3-MoE): route each token to its
// experts, run every expert on the tokens it was given, and sum their outputs by the routing weights.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/model_config.hpp"
#include "runtime/model_weights.hpp"

namespace troupe::runtime {

// One layer's experts as a rank holds them (the whole model's without tensor parallelism). At
// tensor parallelism each rank holds a slice of every expert's rows and routes from the whole
// router and the whole hidden state, so every rank routes the same way and `out` is this rank's
// term of the sum the caller all-reduces, as for the dense MLP.
struct moe_layer_weights {
  std::span<const float> router;             // [experts, hidden]
  std::span<const float> experts_gate_up;    // [experts, 2 * expert_inter, hidden]: per expert, gate rows then up rows
  std::span<const float> experts_down;       // [experts, hidden, expert_inter]
  int expert_inter = 0;                      // this rank's rows of each expert
  std::span<const float> shared_gate_up;     // [2 * shared_inter, hidden]; empty: no shared expert
  std::span<const float> shared_down;        // [hidden, shared_inter]
  std::span<const float> shared_expert_gate; // [hidden]
  int shared_inter = 0;
};

// Reuses its scratch from step to step: after the largest step seen, no allocation.
class cpu_moe_layer {
 public:
  // out = Σ_j weight_j expert_j(h) (+ sigmoid(shared_expert_gate · h) shared_expert(h)) for each token,
  // expert(h) = down · (act(gate · h) * (up · h)).        h, out [rows, hidden]
  void forward(const model_config& config, const moe_layer_weights& w, std::span<const float> h, int rows,
               std::span<float> out, kernels::cpu::thread_pool* pool);

 private:
  std::vector<float> router_logits_, route_weights_;
  std::vector<std::int32_t> route_ids_;
  // The slots (token * top_k + choice) routed to expert e: expert_slots_[expert_start_[e], expert_start_[e + 1]).
  std::vector<int> expert_start_, expert_slots_, expert_cursor_;
  std::vector<float> rows_, gate_up_, act_, expert_out_;
};

} // namespace troupe::runtime
