// Soft-capping (reference): x -> cap * tanh(x / cap), in the order transformers' Gemma 2 computes it.
#include <cmath>

#include "kernels/cpu/cpu_kernels.hpp"

namespace troupe::kernels::cpu {

void logit_softcap(std::span<float> x, float cap) {
  for (float& v : x)
    v = std::tanh(v / cap) * cap;
}

} // namespace troupe::kernels::cpu
