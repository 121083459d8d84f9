// Scatter of this step's K and V into the paged cache (reference).
#include <algorithm>

#include "kernels/cpu/cpu_kernels.hpp"

namespace troupe::kernels::cpu {

void write_kv_cache(std::span<const float> k, std::span<const float> v, std::span<const std::int64_t> slot_mapping,
                    int kv_heads, int head_dim, int block_size, std::span<float> k_cache, std::span<float> v_cache) {
  for (std::size_t t = 0; t < slot_mapping.size(); ++t) {
    std::int64_t slot = slot_mapping[t];
    if (slot < 0)
      continue;
    std::int64_t block = slot / block_size, offset = slot % block_size;
    for (int h = 0; h < kv_heads; ++h) {
      std::size_t src = (t * kv_heads + h) * head_dim;
      std::size_t dst = ((static_cast<std::size_t>(block) * kv_heads + h) * block_size + offset) * head_dim;
      std::copy_n(k.data() + src, head_dim, k_cache.data() + dst);
      std::copy_n(v.data() + src, head_dim, v_cache.data() + dst);
    }
  }
}

} // namespace troupe::kernels::cpu
