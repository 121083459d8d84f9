// Tensor-parallel rank runners in a GPU test: N ranks on one device built from a loaded model's
// slices, and driven as one group (rank 0 executes or samples, the others follow, each on a
// thread of its own since the collectives need every rank inside).
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "runtime/cuda/cuda_model_runner.hpp"
#include "runtime/cuda/cuda_runner_factory.hpp"
#include "runtime/weight_shard.hpp"

namespace troupe::testing {

// Runs job(r) for every rank at once, one thread each (collectives need every rank inside).
inline void on_every_rank(int ranks, const std::function<void(int)>& job) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        job(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads)
    t.join();
  for (auto& e : errors)
    if (e)
      std::rethrow_exception(e);
}

// N rank runners on device 0, driven as one: rank 0 executes (or samples), the others follow.
struct rank_group {
  std::vector<std::unique_ptr<runtime::model_runner>> ranks;

  void execute(const runtime::step_batch& batch, std::span<float> logits) {
    on_every_rank(static_cast<int>(ranks.size()), [&](int r) {
      if (r == 0)
        ranks[0]->execute(batch, logits);
      else
        ranks[static_cast<std::size_t>(r)]->follow_step(batch);
    });
  }
  void execute_sampled(const runtime::step_batch& batch, std::span<const runtime::device_sample> rows,
                       std::span<runtime::token_id> tokens) {
    on_every_rank(static_cast<int>(ranks.size()), [&](int r) {
      if (r == 0)
        ranks[0]->execute_sampled(batch, rows, tokens, {});
      else
        ranks[static_cast<std::size_t>(r)]->follow_step(batch);
    });
  }
  runtime::cuda_model_runner& rank(int r) { return static_cast<runtime::cuda_model_runner&>(*ranks[static_cast<std::size_t>(r)]); }
};

// `ranks` ranks of the model, all on device 0 (o.num_blocks must be set).
inline rank_group make_ranks(const runtime::model_config& cfg, const runtime::model_weights& full,
                      const runtime::cuda_runner_options& o, int ranks) {
  rank_group g;
  g.ranks = runtime::make_cuda_rank_runners(
      cfg, [&](const runtime::shard_shape& s) { return runtime::shard_weights(full, cfg, s); }, o,
      std::vector<int>(static_cast<std::size_t>(ranks), 0));
  return g;
}

} // namespace troupe::testing
