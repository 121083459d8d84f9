// A checkpoint's logits at tensor parallelism on the CPU: `ranks` runners, each over the shard it
// loaded from the store, run together (tests/support/rank_threads.hpp); every rank must gather the
// same whole rows.
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "runtime/cpu/cpu_model_runner.hpp"
#include "runtime/cpu/shared_memory_collective.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/shard_shape.hpp"
#include "tests/support/rank_threads.hpp"

namespace troupe::testing {

// run(runner) on each rank's runner; rank 0's result.
template <class Run>
std::vector<float> sharded_cpu_logits(const runtime::model_config& cfg, const runtime::tensor_store& store,
                                      runtime::kv_cache_config cache, int ranks, Run run) {
  auto group = runtime::make_shared_memory_group(ranks);
  const auto shapes = runtime::shard_shapes(cfg, ranks);
  std::vector<std::unique_ptr<runtime::cpu_model_runner>> runners;
  for (int r = 0; r < ranks; ++r)
    runners.push_back(
        std::make_unique<runtime::cpu_model_runner>(cfg, runtime::load_model_weight_shard(store, cfg, shapes[r]), cache,
                                                    1, runtime::tensor_parallel_rank{shapes[r], group[r].get()}));
  std::vector<std::vector<float>> out(static_cast<std::size_t>(ranks));
  on_rank_threads(ranks, [&](int r) { out[r] = run(*runners[r]); });
  for (int r = 1; r < ranks; ++r)
    CHECK(out[r] == out[0]); // every rank gathers the same whole rows
  return out[0];
}

} // namespace troupe::testing
