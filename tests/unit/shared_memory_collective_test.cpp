// The shared-memory collective's abort: a rank that fails inside a step aborts the group, every
// rank waiting in a call (or calling later) throws collective_aborted instead of waiting forever,
// and after reset() the same group sums again. Built into the TSan run with the other unit tests.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "runtime/cpu/shared_memory_collective.hpp"

using namespace troupe;

namespace {

// Every rank all-reduces `rounds` buffers of rank + 1; true when each sum was right on every rank.
bool sums_on_every_rank(std::vector<std::unique_ptr<runtime::collective>>& group, int rounds) {
  const int ranks = static_cast<int>(group.size());
  std::vector<int> wrong(static_cast<std::size_t>(ranks), 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      std::vector<float> data(64);
      for (int i = 0; i < rounds; ++i) {
        std::fill(data.begin(), data.end(), static_cast<float>(r + 1));
        group[r]->all_reduce_sum(data);
        const auto expected = static_cast<float>(ranks * (ranks + 1) / 2);
        wrong[r] += static_cast<int>(std::count_if(data.begin(), data.end(), [&](float x) { return x != expected; }));
      }
    });
  for (auto& t : threads)
    t.join();
  return std::all_of(wrong.begin(), wrong.end(), [](int w) { return w == 0; });
}

} // namespace

TEST_CASE("a rank that aborts releases the others waiting in all_reduce_sum, and after reset the group sums again") {
  auto group = runtime::make_shared_memory_group(3);
  std::vector<std::string> caught(3);
  std::atomic<int> entered = 0;
  std::vector<std::thread> waiters;
  for (int r = 1; r < 3; ++r)
    waiters.emplace_back([&, r] {
      std::vector<float> data(16, 1.0f);
      ++entered;
      try {
        group[r]->all_reduce_sum(data);
      } catch (const runtime::collective_aborted& e) {
        caught[r] = e.what();
      }
    });
  // Rank 0 fails before its call: it aborts instead of joining.
  while (entered < 2)
    std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20)); // let them reach the barrier
  group[0]->abort();
  for (auto& t : waiters)
    t.join();
  for (int r = 1; r < 3; ++r) {
    CAPTURE(r);
    CHECK(caught[r].find("the shared-memory group of 3 ranks was aborted") != std::string::npos);
  }

  // Until reset, every call on every rank throws at once (no rank is left waiting for the others).
  std::vector<float> data(16, 1.0f), whole(16);
  CHECK_THROWS_AS(group[0]->all_reduce_sum(data), runtime::collective_aborted);
  CHECK_THROWS_AS(group[2]->all_gather_columns(std::span(data).first(4), 1, 0, whole), runtime::collective_aborted);

  group[1]->reset(); // any member re-arms the whole group
  CHECK(sums_on_every_rank(group, 5));
}

TEST_CASE("an abort from outside the group releases ranks in either barrier of a call, whenever it comes") {
  // Three ranks all-reduce in a loop while another thread aborts at a varying moment: each rank
  // ends (returns or throws), none hangs, and the group works again after reset.
  auto group = runtime::make_shared_memory_group(3);
  for (int trial = 0; trial < 20; ++trial) {
    CAPTURE(trial);
    std::atomic<int> aborted_ranks = 0;
    std::vector<std::thread> threads;
    for (int r = 0; r < 3; ++r)
      threads.emplace_back([&, r] {
        std::vector<float> data(256, 1.0f);
        try {
          for (;;)
            group[r]->all_reduce_sum(data);
        } catch (const runtime::collective_aborted&) {
          ++aborted_ranks;
        }
      });
    std::this_thread::sleep_for(std::chrono::microseconds(50 + 97 * trial));
    group[0]->abort();
    group[2]->abort(); // twice: harmless
    for (auto& t : threads)
      t.join();
    CHECK(aborted_ranks == 3);
    group[0]->reset();
    CHECK(sums_on_every_rank(group, 3));
  }
}
