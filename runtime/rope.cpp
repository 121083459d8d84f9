// Rope frequencies. Llama-3 scaling keeps high frequencies, divides low ones by
// `factor`, and blends linearly in between (Meta's reference, rope_scaling
// "llama3"); linear scaling divides every frequency by `factor`.
#include "runtime/rope.hpp"

#include <cmath>
#include <numbers>

namespace troupe::runtime {

std::vector<float> rope_inv_freq(const model_config& cfg, bool sliding_rope) {
  int half = cfg.head_dim / 2;
  std::vector<float> inv_freq(half);
  const bool local = sliding_rope && cfg.sliding_rope_theta;
  const rope_scaling rs = local ? rope_scaling{} : cfg.rope;
  const double theta = local ? *cfg.sliding_rope_theta : cfg.rope_theta;
  for (int i = 0; i < half; ++i) {
    double freq = 1.0 / std::pow(theta, 2.0 * i / cfg.head_dim);
    switch (rs.type) {
      case rope_scaling_type::none:
        break;
      case rope_scaling_type::linear:
        freq /= rs.factor;
        break;
      case rope_scaling_type::llama3: {
        double old_len = rs.original_max_position_embeddings;
        double low_freq_wavelen = old_len / rs.low_freq_factor;
        double high_freq_wavelen = old_len / rs.high_freq_factor;
        double wavelen = 2.0 * std::numbers::pi / freq;
        if (wavelen > low_freq_wavelen) {
          freq /= rs.factor;
        } else if (wavelen >= high_freq_wavelen) {
          double smooth = (old_len / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
          freq = (1.0 - smooth) * freq / rs.factor + smooth * freq;
        }
        break;
      }
    }
    inv_freq[i] = static_cast<float>(freq);
  }
  return inv_freq;
}

} // namespace troupe::runtime
