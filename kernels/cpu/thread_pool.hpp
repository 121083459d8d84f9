// A small fixed pool of worker threads with a blocking parallel_for: the CPU
// reference kernels split their outer loops over it when the work is large
// enough to pay for the hand-off.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace troupe::kernels::cpu {

class thread_pool {
 public:
  // threads = total workers including the calling thread; 0 = hardware_concurrency.
  explicit thread_pool(std::size_t threads = 0);
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  std::size_t size() const { return workers_.size() + 1; }

  // Calls fn(begin, end) over [0, n) split into at most size() contiguous
  // ranges; returns when all have run. The caller's thread takes one range.
  void parallel_for(std::size_t n, const std::function<void(std::size_t, std::size_t)>& fn);

 private:
  void worker_loop(std::size_t index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(std::size_t, std::size_t)>* job_ = nullptr;
  std::size_t job_n_ = 0;
  std::size_t generation_ = 0;
  std::size_t pending_ = 0;
  bool stopping_ = false;
};

// Runs fn over [0, n) on pool when given and the work is worth splitting,
// inline otherwise.
inline void parallel_for(thread_pool* pool, std::size_t n, std::size_t work_per_item,
                         const std::function<void(std::size_t, std::size_t)>& fn) {
  // About 40 us of single-core work: below that, waking a worker costs more than it saves.
  constexpr std::size_t min_parallel_work = 1 << 17;
  if (pool == nullptr || pool->size() == 1 || n < 2 || n * work_per_item < min_parallel_work)
    fn(0, n);
  else
    pool->parallel_for(n, fn);
}

} // namespace troupe::kernels::cpu
