// The ranks of a tensor-parallel group in a test: each runs on a thread of its own (they meet in
// collectives, so they must run at once), and the first rank's exception is rethrown once all have
// joined.
#pragma once

#include <exception>
#include <thread>
#include <vector>

namespace troupe::testing {

// fn(rank) for ranks 0 .. ranks - 1, each on its own thread.
template <class F>
void on_rank_threads(int ranks, F&& fn) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads)
    t.join();
  for (const auto& e : errors)
    if (e)
      std::rethrow_exception(e);
}

} // namespace troupe::testing
