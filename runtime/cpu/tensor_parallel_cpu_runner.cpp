// Tensor-parallel ranks on threads: rank 0 leads, the others follow its steps and copies.
#include "runtime/cpu/tensor_parallel_cpu_runner.hpp"

#include "runtime/cpu/shared_memory_collective.hpp"
#include "runtime/weight_shard.hpp"

namespace troupe::runtime {

tensor_parallel_cpu_runner::tensor_parallel_cpu_runner(const model_config& config, const model_weights& weights,
                                                       kv_cache_config cache, int ranks, std::size_t threads) {
  const auto shapes = shard_shapes(config, ranks);
  group_ = make_shared_memory_group(ranks);
  for (int r = 0; r < ranks; ++r) {
    const auto& shape = shapes[static_cast<std::size_t>(r)];
    ranks_.push_back(std::make_unique<cpu_model_runner>(config, shard_weights(weights, config, shape), cache, threads,
                                                        tensor_parallel_rank{shape, group_[r].get()}));
  }
  follower_logits_.resize(static_cast<std::size_t>(ranks));
  errors_.resize(static_cast<std::size_t>(ranks));
  for (int r = 1; r < ranks; ++r)
    followers_.emplace_back([this, r] { follow(r); });
}

tensor_parallel_cpu_runner::~tensor_parallel_cpu_runner() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : followers_)
    t.join();
}

void tensor_parallel_cpu_runner::follow(int rank) {
  std::size_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job = nullptr;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_)
        return;
      seen = generation_;
      job = job_;
    }
    try {
      (*job)(rank);
    } catch (...) {
      errors_[static_cast<std::size_t>(rank)] = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      --pending_;
    }
    done_.notify_one();
  }
}

void tensor_parallel_cpu_runner::on_every_rank(const std::function<void(int)>& job) {
  {
    std::lock_guard lock(mutex_);
    job_ = &job;
    pending_ = followers_.size();
    ++generation_;
  }
  wake_.notify_all();
  try {
    job(0);
  } catch (...) {
    errors_[0] = std::current_exception();
  }
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
  }
  std::exception_ptr first;
  for (auto& e : errors_) {
    if (e && !first)
      first = e;
    e = nullptr;
  }
  if (first)
    std::rethrow_exception(first);
}

void tensor_parallel_cpu_runner::execute(const step_batch& batch, std::span<float> logits) {
  const std::size_t whole = batch.logits_rows.size() * static_cast<std::size_t>(config().vocab_size);
  on_every_rank([&](int r) {
    if (r == 0) {
      ranks_[0]->execute(batch, logits);
      return;
    }
    auto& own = follower_logits_[static_cast<std::size_t>(r)];
    if (own.size() < whole)
      own.resize(whole);
    ranks_[static_cast<std::size_t>(r)]->execute(batch, own);
  });
}

void tensor_parallel_cpu_runner::copy_blocks(kv_copy kind, std::span<const block_copy> pairs) {
  on_every_rank([&](int r) { ranks_[static_cast<std::size_t>(r)]->copy_blocks(kind, pairs); });
}

std::size_t tensor_parallel_cpu_runner::block_bytes() const {
  std::size_t bytes = 0;
  for (const auto& r : ranks_)
    bytes += r->block_bytes();
  return bytes;
}

} // namespace troupe::runtime
