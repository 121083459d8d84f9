// engine.tensor-parallel-size on device=cuda through the actors, ranks sharing this one GPU
// (engine.tensor-parallel-devices=0,0: they meet through peer loads, the step's sharded code
// and protocols are those of ranks on distinct GPUs). The CPU actor tests' checks
// (tests/support/tensor_parallel_checks.hpp) with CUDA ranks: golden greedy tokens in float32,
// chunked prefill with prefix-cache hits and swap preemption giving the text of one rank, a
// failed step failing only its requests naming the rank, and a dead rank's group restarted.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/cuda_devices.hpp"
#include "runtime/cuda/device_collective.hpp"
#include "tests/support/engine_harness.hpp"
#include "tests/support/tensor_parallel_checks.hpp"
#include "troupe/errors.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

// Before CUDA starts (static initialization precedes main): ranks that share this GPU need every
// kernel loaded up front and a hardware queue per stream (the engine refuses them otherwise).
const bool eager_loading = runtime::set_shared_device_environment();

// float32 at `ranks` ranks, all on GPU 0 (on_one_gpu).
engine_config cuda_ranks(engine_config cfg, int ranks) {
  cfg.dtype = "float32";
  cfg.tensor_parallel_size = ranks;
  return on_one_gpu(cfg);
}

} // namespace

TEST_CASE("cuda at 2 and 4 ranks on one GPU: the engine reproduces golden_greedy.json") {
  REQUIRE(eager_loading);
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    check_golden_greedy(cuda_ranks(stories_engine_config(), ranks));
  }
}

TEST_CASE("cuda at 2 ranks: chunked prefill, prefix-cache hits and swap preemption give the text of one rank") {
  check_chunked_prefix_hits(cuda_ranks(stories_engine_config(), 1), cuda_ranks(stories_engine_config(), 2));
  check_swap_preemption(cuda_ranks(stories_engine_config(), 1), cuda_ranks(stories_engine_config(), 2));
}

TEST_CASE("cuda at 2 ranks: a failed step fails its requests naming the rank, and a dead rank's group is restarted") {
  const auto reference = one_after_another(cuda_ranks(stories_engine_config(), 1));
  auto failing = cuda_ranks(stories_engine_config(), 2);
  failing.fail_executor_step = 7;
  const auto failed = one_after_another(failing);
  check_faults_in_turn(failed, reference, 2, "step_failed", "the model step failed: injected fault: executor step");
  CHECK(failed.stats.executor_restarts == 0);

  auto crashing = cuda_ranks(stories_engine_config(), 2);
  crashing.crash_executor = 7;
  const auto crashed = one_after_another(crashing);
  check_faults_in_turn(crashed, reference, 2, "step_failed", "the executor stopped during the model step");
  CHECK(crashed.stats.executor_restarts == 4);
}

TEST_CASE("cuda ranks the GPUs cannot hold are refused at start, naming the numbers") {
  const int visible = runtime::cuda_device_count();
  if (visible == 1 || visible == 3) { // stories260k shares out among 2 or 4 ranks
    auto too_many = stories_engine_config();
    too_many.device = "cuda";
    too_many.tensor_parallel_size = visible + 1; // one more than there are, and no list placing them
    const auto n = std::to_string(visible + 1);
    const std::string expected = n + " ranks need " + n + " GPUs, " + std::to_string(visible) + " visible";
    CHECK_THROWS_WITH_AS(engine_fixture{too_many}, doctest::Contains(expected.c_str()), config_error);
  }
  auto no_pool = cuda_ranks(stories_engine_config(), 2);
  no_pool.num_device_blocks = 0;
  CHECK_THROWS_WITH_AS(engine_fixture{no_pool}, doctest::Contains("need engine.num-device-blocks"), config_error);
}
