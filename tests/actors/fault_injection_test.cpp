// Faults made on purpose ([debug] keys, runtime/fault_injector) and the engine's
// recovery, through its actors: the requests a fault touches end with an error
// that names it (or, where nothing is lost, not at all), every other request
// produces exactly what it produces without faults, the failed actor is
// restarted, and the engine ends with every KV block free and keeps serving.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/support/engine_harness.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

const char* const prompts[] = {"Once upon a time", "The little dog", "Lily wanted to", "One day, a bird",
                               "Tom and his mom", "There was a big tree", "The sun was", "A cat sat"};

// Greedy requests, half of them with a repetition penalty: their tokens depend on the
// executor's sampling history, which a restarted executor must be sent again.
std::vector<request_spec> workload(int n, int max_tokens) {
  std::vector<request_spec> specs;
  for (int i = 0; i < n; ++i) {
    auto s = greedy_spec(prompts[i % 8], max_tokens);
    if (i % 2 == 1)
      s.params.repetition_penalty = 1.3f;
    specs.push_back(std::move(s));
  }
  return specs;
}

std::vector<request_outcome> without_faults(const engine_config& cfg, const std::vector<request_spec>& specs) {
  engine_config clean = cfg;
  clean.fail_executor_step = clean.crash_executor = clean.fail_swap_copy = 0;
  clean.fail_draft = clean.crash_draft = clean.fail_tokenizer = 0;
  engine_fixture fx(clean);
  auto out = fx.run(specs);
  for (const auto& o : out)
    REQUIRE(o.finished);
  return out;
}

struct fault_run {
  std::vector<request_outcome> outcomes;
  engine_stats stats;
  int finished = 0, failed = 0;
};

// What a request a fault touched must end with: its code, words of its message, and whether
// the scheduler failed it (a step's requests) or the request actor did (a tokenizer fault).
struct expected_failure {
  std::string code, message;
  bool by_scheduler = true;
};
const expected_failure none{"none", "", true};

// Every request ends once; each finished one equals its fault-free run; each failed
// one carries the expected code and message. The engine settles with all blocks back.
fault_run run_and_check(const engine_config& cfg, const std::vector<request_spec>& specs,
                        const expected_failure& expect) {
  auto expected = without_faults(cfg, specs);
  engine_fixture fx(cfg);
  fault_run r;
  r.outcomes = fx.run(specs);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const auto& o = r.outcomes[i];
    CAPTURE(i);
    CHECK(o.finished != o.failed);
    if (o.finished) {
      ++r.finished;
      CHECK(o.token_ids == expected[i].token_ids);
      CHECK(o.text == expected[i].text);
    } else {
      ++r.failed;
      CHECK(o.error.code == expect.code);
      CHECK_MESSAGE(o.error.message.find(expect.message) != std::string::npos, o.error.message);
    }
  }
  r.stats = fx.settled_stats();
  CHECK(r.stats.running == 0);
  CHECK(r.stats.waiting == 0);
  CHECK(r.stats.swapped == 0);
  CHECK(r.stats.device_blocks_free == r.stats.device_blocks_total);
  CHECK(r.stats.host_blocks_free == r.stats.host_blocks_total);
  CHECK(r.stats.requests_failed == (expect.by_scheduler ? static_cast<std::uint64_t>(r.failed) : 0));
  // And it still serves: a request after the faults (retried while a fault hits it) finishes as it should.
  auto after = greedy_spec("After the storm", 8);
  auto reference = without_faults(cfg, {after});
  bool served = false;
  for (int attempt = 0; attempt < 20 && !served; ++attempt) {
    auto o = fx.run({after})[0];
    if (o.finished) {
      served = true;
      CHECK(o.token_ids == reference[0].token_ids);
    } else {
      CHECK(o.error.code == expect.code);
    }
  }
  CHECK(served);
  return r;
}

} // namespace

TEST_CASE("a model step that throws fails the requests in it, and only those") {
  auto cfg = stories_engine_config();
  cfg.max_num_seqs = 2;  // steps of two sequences: a lost step leaves the others running
  cfg.fail_executor_step = 37;  // about 100 steps in all: two or three of them fail
  auto r = run_and_check(cfg, workload(8, 24), {"step_failed", "the model step failed: injected fault: executor step"});
  CHECK(r.failed >= 1);
  CHECK(r.finished >= 3);
  CHECK(r.stats.step_failures >= 1);
  CHECK(r.stats.executor_restarts == 0);
}

TEST_CASE("an executor that dies in a step is restarted, and the other requests go on with it") {
  auto cfg = stories_engine_config();
  cfg.max_num_seqs = 2;
  cfg.crash_executor = 41;
  auto r = run_and_check(cfg, workload(8, 24), {"step_failed", "the executor stopped during the model step"});
  CHECK(r.failed >= 1);
  CHECK(r.finished >= 3);
  CHECK(r.stats.executor_restarts >= 1);
  CHECK(r.stats.step_failures >= r.stats.executor_restarts);
}

TEST_CASE("an executor that dies while the others wait, swapped out, restarts and they resume") {
  // Four seats, eight 85-token requests, 10 blocks of 16 (two such sequences fill them): swapping all
  // along, so when the executor dies some sequences wait and some are swapped out; their sampling
  // histories (penalties) must reach the new executor.
  auto cfg = stories_engine_config();
  cfg.max_num_seqs = 4;
  cfg.num_device_blocks = 10;
  cfg.crash_executor = 97;
  auto r = run_and_check(cfg, workload(8, 80), {"step_failed", "the executor stopped during the model step"});
  CHECK(r.stats.executor_restarts >= 1);
  CHECK(r.stats.preemptions_swap >= 1);
  CHECK(r.finished >= 3);
}

TEST_CASE("a swap copy that fails costs the sequence a recompute, not its request") {
  auto cfg = stories_engine_config();
  cfg.num_device_blocks = 16;  // eight 100-token sequences need 56 blocks: preemption by swap all along
  cfg.preemption_mode = "swap";
  cfg.fail_swap_copy = 3;  // every third swap copy: out and in alike (every other one could hit only outs)
  auto r = run_and_check(cfg, workload(8, 96), none);
  CHECK(r.failed == 0);
  CHECK(r.stats.swap_copy_failures >= 2);
  CHECK(r.stats.preemptions_swap >= 1);
  CHECK(r.stats.preemptions_recompute >= 1);  // the failed swaps' sequences
  CHECK(r.stats.swap_fallbacks >= 1);         // copies out that failed
  CHECK(r.stats.swap_in_failures >= 1);       // copies back that failed
}

TEST_CASE("a draft that throws or dies costs speculation, not requests") {
  // The n-gram draft keeps nothing per sequence; the self draft (the model's first layer) keeps KV
  // blocks, which a restarted draft must reset.
  for (const char* method : {"ngram", "self"}) {
    CAPTURE(method);
    auto cfg = stories_engine_config();
    cfg.speculative_method = method;
    cfg.draft_layers = 1;
    cfg.num_speculative_tokens = 3;
    cfg.adaptive_speculation = false;
    cfg.fail_draft = 9;
    cfg.crash_draft = 13;
    auto r = run_and_check(cfg, workload(6, 48), none);
    CHECK(r.failed == 0);
    CHECK(r.stats.draft_failures >= 1);
    CHECK(r.stats.draft_restarts >= 2);
    // Speculation goes on between the faults: more verifications than faults.
    CHECK(r.stats.spec_verifications > 2 * (r.stats.draft_failures + r.stats.draft_restarts));
    CHECK(r.stats.spec_accepted > 0);
  }
}

TEST_CASE("a tokenizer that throws fails that request with tokenizer_error, and only it") {
  auto cfg = stories_engine_config();
  cfg.fail_tokenizer = 50;  // of about 140 prompt encodes and output token decodes
  auto specs = workload(8, 16);
  // Token-id prompts are not encoded: these meet the fault only in their decodes.
  specs[6].prompt_ids = {1, 403, 407, 261};
  auto r = run_and_check(cfg, specs, {"tokenizer_error", "injected fault: tokenizer", false});
  CHECK(r.failed >= 1);
  CHECK(r.finished >= 1);
  CHECK(r.stats.step_failures == 0);
}

TEST_CASE("fault injection is off by default, and debug keys must not be negative") {
  engine_config cfg;
  CHECK(cfg.fail_executor_step == 0);
  CHECK(cfg.crash_executor == 0);
  CHECK(cfg.fail_swap_copy == 0);
  CHECK(cfg.fail_draft == 0);
  CHECK(cfg.crash_draft == 0);
  CHECK(cfg.fail_tokenizer == 0);
  cfg.fail_swap_copy = -1;
  CHECK_THROWS_WITH_AS(validate(cfg), doctest::Contains("debug.fail-swap-copy"), config_error);
}
