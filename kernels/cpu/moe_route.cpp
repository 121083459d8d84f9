// Mixture-of-experts routing (reference): softmax over a token's router logits, its top_k experts.
#include <cmath>

#include "kernels/cpu/cpu_kernels.hpp"

namespace troupe::kernels::cpu {

void moe_route(std::span<const float> logits, int rows, int experts, int top_k, bool normalize,
               std::span<std::int32_t> ids, std::span<float> weights) {
  for (int r = 0; r < rows; ++r) {
    const float* l = logits.data() + static_cast<std::size_t>(r) * experts;
    std::int32_t* id = ids.data() + static_cast<std::size_t>(r) * top_k;
    float* weight = weights.data() + static_cast<std::size_t>(r) * top_k;
    float top = l[0];
    for (int e = 1; e < experts; ++e)
      top = std::fmax(top, l[e]);
    float sum = 0.0f;
    for (int e = 0; e < experts; ++e)
      sum += std::exp(l[e] - top);
    // The same expression every time it is asked for, so that equal probabilities compare equal.
    const auto probability = [&](int e) { return std::exp(l[e] - top) / sum; };
    // Selection without a buffer: top_k passes, each taking the largest probability not yet taken; a
    // strict > keeps the lower expert on a tie. The probabilities come out in descending order.
    float kept = 0.0f;
    for (int k = 0; k < top_k; ++k) {
      int best = -1;
      float best_p = 0.0f;
      for (int e = 0; e < experts; ++e) {
        bool taken = false;
        for (int j = 0; j < k && !taken; ++j)
          taken = id[j] == e;
        if (taken)
          continue;
        const float p = probability(e);
        if (best < 0 || p > best_p) {
          best = e;
          best_p = p;
        }
      }
      id[k] = best;
      weight[k] = best_p;
      kept += best_p;
    }
    if (normalize)
      for (int k = 0; k < top_k; ++k)
        weight[k] /= kept;
  }
}

} // namespace troupe::kernels::cpu
