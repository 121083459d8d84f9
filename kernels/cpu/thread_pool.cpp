// The worker pool behind the CPU kernels' parallel loops.
#include "kernels/cpu/thread_pool.hpp"

#include <algorithm>

namespace troupe::kernels::cpu {

namespace {
std::pair<std::size_t, std::size_t> range_of(std::size_t part, std::size_t parts, std::size_t n) {
  std::size_t base = n / parts, extra = n % parts;
  std::size_t begin = part * base + std::min(part, extra);
  return {begin, begin + base + (part < extra ? 1 : 0)};
}
} // namespace

thread_pool::thread_pool(std::size_t threads) {
  if (threads == 0)
    threads = std::max<std::size_t>(1, std::thread::hardware_concurrency());
  for (std::size_t i = 1; i < threads; ++i)
    workers_.emplace_back([this, i] { worker_loop(i); });
}

thread_pool::~thread_pool() {
  {
    std::lock_guard lock{mutex_};
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_)
    t.join();
}

void thread_pool::parallel_for(std::size_t n, const std::function<void(std::size_t, std::size_t)>& fn) {
  {
    std::lock_guard lock{mutex_};
    job_ = &fn;
    job_n_ = n;
    pending_ = workers_.size();
    ++generation_;
  }
  wake_.notify_all();
  auto [begin, end] = range_of(0, size(), n);
  if (begin < end)
    fn(begin, end);
  std::unique_lock lock{mutex_};
  done_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void thread_pool::worker_loop(std::size_t index) {
  std::size_t seen = 0;
  for (;;) {
    const std::function<void(std::size_t, std::size_t)>* job;
    std::size_t n;
    {
      std::unique_lock lock{mutex_};
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_)
        return;
      seen = generation_;
      job = job_;
      n = job_n_;
    }
    auto [begin, end] = range_of(index, size(), n);
    if (begin < end)
      (*job)(begin, end);
    {
      std::lock_guard lock{mutex_};
      if (--pending_ == 0)
        done_.notify_one();
    }
  }
}

} // namespace troupe::kernels::cpu
