// Deterministic random weights: one generator, tensors filled in a fixed order (the weight
// plan's). A rank draws every value of every tensor, so that each value is the one the whole
// model has, and keeps only those of its slices.
#include "runtime/dummy_weights.hpp"

#include <random>

#include "runtime/weight_plan.hpp"

namespace troupe::runtime {

namespace {

model_weights generate(const model_config& cfg, std::uint64_t seed, const shard_shape& shard) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  model_weights w;
  for (const planned_tensor& t : plan_weights(cfg, shard, w)) {
    std::vector<float>& out = *t.destination;
    const std::size_t count = t.rows * t.columns;
    if (t.kind != planned_tensor::role::matrix) { // norms scale by 1, biases 0: nothing drawn
      out.assign(count, t.kind == planned_tensor::role::norm ? 1.0f - cfg.norm_weight_offset : 0.0f);
      continue;
    }
    // Row-major over the whole matrix (a stack's one matrix: an expert's), keeping the block's values at
    // its place in the destination, which several blocks may share (the experts): at most they are held.
    if (out.size() < t.offset + count)
      out.resize(t.offset + count);
    float* kept = out.data() + t.offset;
    const std::size_t whole_rows = t.whole_rows(), whole_columns = t.whole_columns();
    for (std::size_t r = 0; r < whole_rows; ++r) {
      const bool row_kept = r >= t.row_begin && r < t.row_begin + t.rows;
      for (std::size_t c = 0; c < whole_columns; ++c) {
        const float x = normal(rng);
        if (row_kept && c >= t.column_begin && c < t.column_begin + t.columns)
          *kept++ = x;
      }
    }
  }
  return w;
}

} // namespace

model_weights dummy_weights(const model_config& cfg, std::uint64_t seed) {
  return generate(cfg, seed, whole_model_shard(cfg));
}

model_weights dummy_weight_shard(const model_config& cfg, std::uint64_t seed, const shard_shape& shard) {
  model_weights w = generate(cfg, seed, shard);
  keep_tied_lm_head_rows(w, cfg, shard);
  return w;
}

} // namespace troupe::runtime
