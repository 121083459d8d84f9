// A model runner's paged KV cache: its two tiers in blocks, and tokens per block.
#pragma once

namespace troupe::runtime {

struct kv_cache_config {
  int num_blocks = 0;      // device tier (GPU memory, or the CPU backend's main pool)
  int block_size = 16;     // tokens per block: valid_block_size (kv_geometry.hpp)
  int num_host_blocks = 0; // host tier: swap space in CPU memory
};

} // namespace troupe::runtime
