// Shared-memory all-reduce and all-gather between the threads of one process.
#include "runtime/cpu/shared_memory_collective.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>

namespace troupe::runtime {

namespace {

// What each rank posts before the first barrier of a call: its buffer, and for a gather, where
// its columns go.
struct posted_buffer {
  float* data = nullptr;
  const float* local = nullptr;
  std::size_t size = 0;
  int column_begin = 0;
};

// A generation barrier that an abort opens (std::barrier cannot be woken). A call meets at
// it twice: on entering, when a rank may be missing (it failed, or is gone), so that an abort
// releases the others; and on leaving, when every rank is inside the call and will arrive
// (nothing between the two can fail on one rank alone), so that no rank's buffer is left
// while another still reads or writes it.
class abortable_barrier {
 public:
  explicit abortable_barrier(int ranks) : ranks_(ranks) {}

  // True when every rank has arrived; false when the group was aborted first, or is.
  bool enter() {
    std::unique_lock lock(mutex_);
    if (aborted_)
      return false;
    const std::uint64_t generation = generation_, aborts = aborts_;
    if (arrive())
      return true;
    // An abort counts, not only the flag: a waiter that wakes after a reset still sees it.
    released_.wait(lock, [&] { return generation_ != generation || aborts_ != aborts; });
    return generation_ != generation;
  }

  // Returns when every rank has arrived, aborted or not.
  void leave() {
    std::unique_lock lock(mutex_);
    const std::uint64_t generation = generation_;
    if (!arrive())
      released_.wait(lock, [&] { return generation_ != generation; });
  }

  void abort() {
    std::lock_guard lock(mutex_);
    aborted_ = true;
    ++aborts_;
    released_.notify_all();
  }

  void reset() {
    std::lock_guard lock(mutex_);
    aborted_ = false;
    arrived_ = 0; // ranks that entered before the abort have left
  }

 private:
  // Counts this rank in; the last one starts the next generation and wakes the others.
  bool arrive() {
    if (++arrived_ < ranks_)
      return false;
    arrived_ = 0;
    ++generation_;
    released_.notify_all();
    return true;
  }

  std::mutex mutex_;
  std::condition_variable released_;
  const int ranks_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0, aborts_ = 0;
  bool aborted_ = false;
};

struct group_state {
  explicit group_state(int ranks)
      : meet(ranks),
        posted(static_cast<std::size_t>(ranks)),
        name("the shared-memory group of " + std::to_string(ranks) + " ranks") {}
  abortable_barrier meet;
  std::vector<posted_buffer> posted; // one per rank; a rank writes only its own
  const std::string name;            // what collective_aborted says
};

class shared_memory_collective final : public collective {
 public:
  shared_memory_collective(std::shared_ptr<group_state> group, int rank) : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(group_->posted.size()); }
  void abort() override { group_->meet.abort(); }
  void reset() override { group_->meet.reset(); }

  // Rank r sums the elements of its chunk [r * n / N, (r + 1) * n / N) over every rank's buffer
  // and writes the sum back into all of them. No other rank reads or writes those elements, so
  // the buffers themselves are the workspace; leaving together keeps every buffer untouched by
  // its owner until all the chunks are in.
  void all_reduce_sum(std::span<float> data) override {
    auto& posted = group_->posted;
    posted[rank_] = {.data = data.data(), .size = data.size()};
    enter();
    const std::size_t n = data.size(), ranks = posted.size();
    for (const auto& p : posted)
      if (p.size != n) // every rank sees the mismatch and throws: none is left waiting
        throw std::logic_error("all_reduce_sum: the ranks' buffers differ in size (" + std::to_string(p.size) +
                               " and " + std::to_string(n) + " elements)");
    const std::size_t begin = n * rank_ / ranks, end = n * (rank_ + 1) / ranks;
    float* sum = posted[0].data;
    for (std::size_t r = 1; r < ranks; ++r) {
      const float* part = posted[r].data;
      for (std::size_t i = begin; i < end; ++i)
        sum[i] += part[i];
    }
    for (std::size_t r = 1; r < ranks; ++r)
      std::copy(sum + begin, sum + end, posted[r].data + begin);
    group_->meet.leave();
  }

  void all_gather_columns(std::span<const float> local, int rows, int column_begin, std::span<float> whole) override {
    auto& posted = group_->posted;
    posted[rank_] = {.local = local.data(), .size = local.size(), .column_begin = column_begin};
    enter();
    if (rows > 0) {
      const std::size_t columns = whole.size() / rows;
      for (const auto& p : posted) // every rank sees a bad range and throws before copying: none is left waiting
        if (p.column_begin < 0 || p.column_begin + p.size / rows > columns)
          throw std::logic_error("all_gather_columns: columns [" + std::to_string(p.column_begin) + ", +" +
                                 std::to_string(p.size / rows) + ") are outside the " + std::to_string(columns) +
                                 " columns of the whole");
      for (const auto& p : posted) {
        const std::size_t width = p.size / rows;
        for (std::size_t row = 0; row < static_cast<std::size_t>(rows); ++row)
          std::copy_n(p.local + row * width, width, whole.data() + row * columns + p.column_begin);
      }
    }
    group_->meet.leave();
  }

 private:
  void enter() {
    if (!group_->meet.enter())
      throw collective_aborted(group_->name);
  }

  std::shared_ptr<group_state> group_;
  int rank_;
};

} // namespace

std::vector<std::unique_ptr<collective>> make_shared_memory_group(int ranks) {
  if (ranks < 1)
    throw std::invalid_argument("a shared-memory group needs at least one rank, got " + std::to_string(ranks));
  auto group = std::make_shared<group_state>(ranks);
  std::vector<std::unique_ptr<collective>> members;
  for (int r = 0; r < ranks; ++r)
    members.push_back(std::make_unique<shared_memory_collective>(group, r));
  return members;
}

} // namespace troupe::runtime
