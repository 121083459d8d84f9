// Causal attention over the paged KV cache (reference). Per (token, head): the
// scores of every visible position, their max, one exp each, then the weighted
// sum of V; fp32 throughout. A query head reads the KV head of its GQA group.
// With a sliding window W the token at position p sees only p - W + 1 .. p. With a softcap c
// (Gemma 2) a score s enters the softmax as c * tanh(s / c).
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
    std::vector<float> scores;
    for (std::size_t t = begin; t < end; ++t) {
      const std::int32_t* table = a.block_tables.data() + static_cast<std::size_t>(seq_of[t]) * a.max_blocks_per_seq;
      const int context = a.positions[t] + 1;
      const int first = a.window > 0 ? std::max(0, context - a.window) : 0;
      scores.resize(context);
      for (int h = 0; h < a.heads; ++h) {
        const int kvh = h / group;
        const float* q = a.q.data() + (t * a.heads + h) * a.head_dim;
        auto kv_offset = [&](int p) {
          std::size_t block = static_cast<std::size_t>(table[p / a.block_size]);
          return ((block * a.kv_heads + kvh) * a.block_size + p % a.block_size) * a.head_dim;
        };
        float max_score = -std::numeric_limits<float>::infinity();
        for (int p = first; p < context; ++p) {
          const float* k = a.k_cache.data() + kv_offset(p);
          float s = 0.0f;
          for (int d = 0; d < a.head_dim; ++d)
            s += q[d] * k[d];
          s *= a.scale;
          if (a.softcap > 0.0f)
            s = a.softcap * std::tanh(s / a.softcap);
          scores[p] = s;
          max_score = std::max(max_score, scores[p]);
        }
        float sum = 0.0f;
        for (int p = first; p < context; ++p)
          sum += (scores[p] = std::exp(scores[p] - max_score));
        float* o = a.out.data() + (t * a.heads + h) * a.head_dim;
        std::fill_n(o, a.head_dim, 0.0f);
        for (int p = first; p < context; ++p) {
          const float* v = a.v_cache.data() + kv_offset(p);
          const float w = scores[p] / sum;
          for (int d = 0; d < a.head_dim; ++d)
            o[d] += w * v[d];
        }
      }
    }
  });
}

} // namespace troupe::kernels::cpu
