// Rotary position embedding, rotate-half layout (reference): element i pairs
// with element i + head_dim/2, as Hugging Face's Llama does.
#include <cmath>

#include "kernels/cpu/cpu_kernels.hpp"

namespace troupe::kernels::cpu {

void rotary_embedding(std::span<float> x, int heads, int head_dim, std::span<const std::int32_t> positions,
                      std::span<const float> inv_freq) {
  int half = head_dim / 2;
  for (std::size_t t = 0; t < positions.size(); ++t) {
    float pos = static_cast<float>(positions[t]);
    for (int i = 0; i < half; ++i) {
      float angle = pos * inv_freq[i];
      float c = std::cos(angle), s = std::sin(angle);
      for (int h = 0; h < heads; ++h) {
        float* v = x.data() + (t * heads + h) * head_dim;
        float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
  }
}

} // namespace troupe::kernels::cpu
