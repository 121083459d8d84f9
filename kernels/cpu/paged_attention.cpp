// Causal attention over the paged KV cache (reference). One pass per (token,
// head) with an online softmax in fp32, the same statistics the CUDA kernels
// keep; a query head reads the KV head it shares with its GQA group.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"

namespace troupe::kernels::cpu {

void paged_attention(const paged_attention_args& a, thread_pool* pool) {
  std::size_t num_seqs = a.query_start.size() - 1;
  std::size_t tokens = a.positions.size();
  int group = a.heads / a.kv_heads;
  // Map each token to its sequence once, so the parallel loop can run over tokens.
  std::vector<std::int32_t> seq_of(tokens);
  for (std::size_t s = 0; s < num_seqs; ++s)
    for (int t = a.query_start[s]; t < a.query_start[s + 1]; ++t)
      seq_of[t] = static_cast<std::int32_t>(s);

  std::size_t work_per_token = static_cast<std::size_t>(a.heads) * a.head_dim * 64;
  parallel_for(pool, tokens, work_per_token, [&](std::size_t begin, std::size_t end) {
    std::vector<float> acc(a.head_dim);
    for (std::size_t t = begin; t < end; ++t) {
      const std::int32_t* table = a.block_tables.data() + static_cast<std::size_t>(seq_of[t]) * a.max_blocks_per_seq;
      int context = a.positions[t] + 1;
      for (int h = 0; h < a.heads; ++h) {
        int kvh = h / group;
        const float* q = a.q.data() + (t * a.heads + h) * a.head_dim;
        float running_max = -std::numeric_limits<float>::infinity();
        float running_sum = 0.0f;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int p = 0; p < context; ++p) {
          std::size_t block = static_cast<std::size_t>(table[p / a.block_size]);
          std::size_t base = ((block * a.kv_heads + kvh) * a.block_size + p % a.block_size) * a.head_dim;
          const float* k = a.k_cache.data() + base;
          const float* v = a.v_cache.data() + base;
          float score = 0.0f;
          for (int d = 0; d < a.head_dim; ++d)
            score += q[d] * k[d];
          score *= a.scale;
          float new_max = std::max(running_max, score);
          float correction = std::exp(running_max - new_max);
          float weight = std::exp(score - new_max);
          running_sum = running_sum * correction + weight;
          for (int d = 0; d < a.head_dim; ++d)
            acc[d] = acc[d] * correction + weight * v[d];
          running_max = new_max;
        }
        float* o = a.out.data() + (t * a.heads + h) * a.head_dim;
        for (int d = 0; d < a.head_dim; ++d)
          o[d] = acc[d] / running_sum;
      }
    }
  });
}

} // namespace troupe::kernels::cpu
