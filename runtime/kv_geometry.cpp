// The KV cache's geometry: the bytes of one block.
#include "runtime/kv_geometry.hpp"

namespace troupe::runtime {

std::size_t kv_block_bytes(const model_config& cfg, int block_size, kv_cache_dtype dtype, int kv_heads) {
  const int heads = kv_heads < 0 ? cfg.num_key_value_heads : kv_heads;
  return 2 * element_bytes(dtype) * static_cast<std::size_t>(cfg.num_hidden_layers) * heads * block_size * cfg.head_dim;
}

} // namespace troupe::runtime
