// The [debug] fault points' counting: one use in N fails, exactly, from any thread.
#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "runtime/fault_injector.hpp"

using namespace troupe::runtime;

TEST_CASE("a fault point fails its Nth, 2Nth, ... use and no other") {
  fault_plan plan;
  plan[fault_point::swap_copy] = 3;
  fault_injector faults(plan);
  std::vector<bool> fails;
  for (int i = 0; i < 9; ++i)
    fails.push_back(faults.should_fail(fault_point::swap_copy));
  CHECK(fails == std::vector<bool>{false, false, true, false, false, true, false, false, true});
  CHECK(faults.injected(fault_point::swap_copy) == 3);
  // The other points are not armed, and counting one does not move another.
  for (int i = 0; i < 10; ++i)
    CHECK_FALSE(faults.should_fail(fault_point::executor_step));
  CHECK(faults.injected(fault_point::executor_step) == 0);
}

TEST_CASE("maybe_throw throws injected_fault naming the point, and a null injector never fails") {
  fault_plan plan;
  plan[fault_point::tokenizer] = 1;
  fault_injector faults(plan);
  CHECK(plan.any());
  CHECK_THROWS_WITH_AS(faults.maybe_throw(fault_point::tokenizer), "injected fault: tokenizer", injected_fault);
  CHECK_NOTHROW(maybe_throw(nullptr, fault_point::tokenizer));
  CHECK_FALSE(should_fail(nullptr, fault_point::tokenizer));
  CHECK_FALSE(fault_plan{}.any());
}

TEST_CASE("uses counted from several threads fail exactly one in N") {
  fault_plan plan;
  plan[fault_point::draft] = 7;
  fault_injector faults(plan);
  constexpr int threads = 4, uses = 7000;
  std::vector<int> failed(threads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < uses; ++i)
        failed[t] += faults.should_fail(fault_point::draft) ? 1 : 0;
    });
  for (auto& th : pool)
    th.join();
  int total = 0;
  for (int f : failed)
    total += f;
  CHECK(total == threads * uses / 7);
  CHECK(faults.injected(fault_point::draft) == static_cast<std::uint64_t>(total));
}

TEST_CASE("a tensor-parallel group counts one use per step, and its faults land on each rank in turn") {
  fault_plan plan;
  plan[fault_point::executor_crash] = 2;
  fault_injector faults(plan);
  std::vector<int> ranks;
  for (int i = 0; i < 8; ++i)
    ranks.push_back(faults.fault_rank(fault_point::executor_crash, 3));
  CHECK(ranks == std::vector<int>{-1, 1, -1, 2, -1, 0, -1, 1});
  CHECK(faults.injected(fault_point::executor_crash) == 4);
  CHECK(fault_rank(nullptr, fault_point::executor_crash, 3) == -1);
  // One rank: every fault is its own, on the same uses as should_fail's.
  fault_injector single(plan);
  CHECK(single.fault_rank(fault_point::executor_crash, 1) == -1);
  CHECK(single.fault_rank(fault_point::executor_crash, 1) == 0);
}
