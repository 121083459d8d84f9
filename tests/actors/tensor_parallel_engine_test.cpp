// engine.tensor-parallel-size on the CPU backend through the actors: each rank is an executor
// actor (rank 0 leads), and the engine's greedy text is the text of one rank — for the golden
// prompts, through chunked prefill and prefix-cache hits, and through swap preemption (every rank
// copies its heads of the same blocks). A step that fails on one rank fails only its requests,
// naming the rank; a rank that dies takes its group down and the engine restarts the group; the
// text after either is the text without faults. Widths the model cannot serve are refused at
// start, naming the numbers.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "tests/support/engine_harness.hpp"
#include "tests/support/tensor_parallel_checks.hpp"
#include "troupe/errors.hpp"

using namespace troupe;
using namespace troupe::testing;


TEST_CASE("at 2 and 4 tensor-parallel ranks the engine reproduces golden_greedy.json") {
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    check_golden_greedy(with_ranks(stories_engine_config(), ranks));
  }
}

TEST_CASE("at 2 ranks, chunked prefill beside decodes and prefix-cache hits give the text of one rank") {
  check_chunked_prefix_hits(with_ranks(stories_engine_config(), 1), with_ranks(stories_engine_config(), 2));
}

TEST_CASE("at 2 ranks, a sequence swapped out and back on every rank continues with the text of one rank") {
  check_swap_preemption(with_ranks(stories_engine_config(), 1), with_ranks(stories_engine_config(), 2));
}

TEST_CASE("a tensor-parallel width the model cannot serve is refused at start, naming the numbers") {
  // stories260k: 8 heads, 4 kv heads, intermediate size 172.
  CHECK_THROWS_WITH_AS(engine_fixture{with_ranks(stories_engine_config(), 3)},
                       doctest::Contains("8 attention heads and 4 key/value heads"), config_error);
  CHECK_THROWS_WITH_AS(engine_fixture{with_ranks(stories_engine_config(), 8)},
                       doctest::Contains("intermediate size 172"), config_error);
  CHECK_THROWS_WITH_AS(engine_fixture{with_ranks(stories_engine_config(), 65)},
                       doctest::Contains("engine.tensor-parallel-size"), config_error);
}

TEST_CASE("a step that fails on one rank fails its requests naming the rank, and the group serves on") {
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    auto cfg = with_ranks(stories_engine_config(), ranks);
    cfg.fail_executor_step = 7;
    const auto run = one_after_another(cfg);
    check_faults_in_turn(run, one_after_another(with_ranks(stories_engine_config(), 1)), ranks, "step_failed", "the model step failed: injected fault: executor step");
    CHECK(run.stats.executor_restarts == 0);
  }
}

TEST_CASE("a rank executor that dies takes its group down, the engine restarts the group, and it serves on") {
  // The first crash is on rank 1, a follower: rank 0 and the others wait for it in the step's
  // first collective until its abort releases them (else this test hangs, or its engine never
  // stops). At 2 ranks the second crash is the leader's.
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    auto cfg = with_ranks(stories_engine_config(), ranks);
    cfg.crash_executor = 7;
    const auto run = one_after_another(cfg);
    check_faults_in_turn(run, one_after_another(with_ranks(stories_engine_config(), 1)), ranks, "step_failed", "the executor stopped during the model step");
    CHECK(run.stats.executor_restarts == 4);
  }
}
