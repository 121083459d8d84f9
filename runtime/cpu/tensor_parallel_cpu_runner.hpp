// N tensor-parallel ranks of one model behind the one model_runner the executor drives: rank 0
// leads on the caller's thread (the executor's), ranks 1..N-1 each run on a thread of their own,
// and every rank is a cpu_model_runner over its shard, meeting the others through a
// shared-memory collective. The scheduler still sends one step and gets one reply.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/cpu/cpu_model_runner.hpp"

namespace troupe::runtime {

class tensor_parallel_cpu_runner final : public model_runner {
 public:
  // Shards `weights` among `ranks` (shard_shapes, shard_weights; throws config_error naming the
  // numbers for a width the model cannot serve) and starts ranks 1..N-1. Each rank's KV pool has
  // cache's blocks of its kv heads; threads: each rank's kernel workers.
  tensor_parallel_cpu_runner(const model_config& config, const model_weights& weights, kv_cache_config cache, int ranks,
                             std::size_t threads = 1);
  ~tensor_parallel_cpu_runner() override;
  tensor_parallel_cpu_runner(const tensor_parallel_cpu_runner&) = delete;
  tensor_parallel_cpu_runner& operator=(const tensor_parallel_cpu_runner&) = delete;

  const model_config& config() const override { return ranks_.front()->config(); }
  const kv_cache_config& cache_config() const override { return ranks_.front()->cache_config(); }
  // Every rank runs the step; rank 0's whole logits rows are the step's.
  void execute(const step_batch& batch, std::span<float> logits) override;
  // Every rank copies its heads of the same blocks.
  void copy_blocks(kv_copy kind, std::span<const block_copy> pairs) override;
  // A block over every rank's heads.
  std::size_t block_bytes() const override;

  int size() const { return static_cast<int>(ranks_.size()); }
  cpu_model_runner& rank(int r) { return *ranks_[static_cast<std::size_t>(r)]; }

 private:
  // Runs job(rank) on every rank, each on its own thread, and returns when all are done; throws
  // the first error in rank order. The ranks fail together (a step the runner refuses is
  // refused by every rank before any collective), so none is left waiting in one.
  void on_every_rank(const std::function<void(int)>& job);
  void follow(int rank);

  std::vector<std::unique_ptr<collective>> group_;
  std::vector<std::unique_ptr<cpu_model_runner>> ranks_;
  std::vector<std::vector<float>> follower_logits_; // ranks 1..N-1 gather whole rows too; unused
  std::vector<std::exception_ptr> errors_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int)>* job_ = nullptr;
  std::size_t generation_ = 0, pending_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> followers_;
};

} // namespace troupe::runtime
