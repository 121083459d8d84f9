// Tiny random mixtures of experts (Mixtral: 8 experts, top 2 renormalized; Qwen2-MoE: top 4 of 8
// unnormalized, q/k/v biases and a sigmoid-gated shared expert; Qwen3-MoE: top 4 of 16, q/k norms) written as
// safetensors, loaded and run by the CPU runner: the teacher-forced logits of a prefill and decode steps equal a
// plain-loop forward pass written in the test, at 1 rank and at 2 tensor-parallel ranks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

#include "runtime/collective.hpp"
#include "runtime/cpu/cpu_model_runner.hpp"
#include "runtime/cpu/shared_memory_collective.hpp"
#include "runtime/model_config.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/safetensors.hpp"
#include "runtime/shard_shape.hpp"
#include "runtime/step_batch_builder.hpp"
#include "tests/support/float_compare.hpp"
#include "tests/support/moe_checkpoint.hpp"
#include "tests/support/sharded_logits.hpp"
#include "tests/support/temp_dir.hpp"

namespace {

using namespace troupe;
using namespace troupe::runtime;
using namespace troupe::testing;

const std::vector<token_id> prompt{17, 90, 3, 61, 3, 40, 71, 8, 64, 20, 5, 17};
constexpr int prefill = 7;
constexpr kv_cache_config cache{.num_blocks = 12, .block_size = 4, .num_host_blocks = 0};

// A prefill of the first tokens, then one decode step a token: every position's logits.
std::vector<step_batch> steps() {
  const int block_size = 4, max_blocks = 4;
  const std::vector<std::int32_t> table{5, 0, 9, 2}; // scattered blocks
  std::vector<step_batch> out;
  step_batch_builder first(block_size, max_blocks);
  first.add(std::span(prompt).first(prefill), 0, table, prefill);
  out.push_back(first.take(0));
  for (int t = prefill; t < static_cast<int>(prompt.size()); ++t) {
    step_batch_builder step(block_size, max_blocks);
    step.add(std::span(prompt).subspan(static_cast<std::size_t>(t), 1), t, table, 1);
    out.push_back(step.take(static_cast<std::uint64_t>(t)));
  }
  return out;
}

std::vector<float> runner_logits(model_runner& runner, int vocab) {
  std::vector<float> all;
  for (const step_batch& b : steps()) {
    std::vector<float> logits(b.logits_rows.size() * static_cast<std::size_t>(vocab));
    runner.execute(b, logits);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

// The same steps on `ranks` runners, each over the shard it loaded from `store`; rank 0's logits.
std::vector<float> tensor_parallel_logits(const model_config& cfg, const tensor_store& store, int ranks) {
  return sharded_cpu_logits(cfg, store, cache, ranks,
                            [&](model_runner& runner) { return runner_logits(runner, cfg.vocab_size); });
}

// Loads the checkpoint, runs it at 1 and 2 ranks and checks both against the plain loops.
void check_against_plain_loops(const moe_model& m, expert_storage storage) {
  temp_dir dir("troupe_moe_forward");
  write_moe_checkpoint(dir.path, m, storage);
  const model_config cfg = load_model_config(dir.path);
  REQUIRE(cfg.moe);
  REQUIRE(cfg.moe->num_experts == m.shape.experts);
  const tensor_store store = tensor_store::open(dir.path);

  const std::vector<float> expected = moe_reference::logits(m, prompt);
  cpu_model_runner runner(cfg, load_model_weights(store, cfg), cache, 2);
  const std::vector<float> got = runner_logits(runner, cfg.vocab_size);
  REQUIRE(got.size() == expected.size());
  const float scale = max_abs(expected);
  REQUIRE(scale > 1.0f);
  const float one_rank = max_abs_diff(got, expected) / scale;
  MESSAGE(m.shape.model_type << " cpu vs plain loops: max |d| / max |logit| = " << one_rank);
  CHECK(one_rank <= 1e-4f);

  const std::vector<float> two = tensor_parallel_logits(cfg, store, 2);
  REQUIRE(two.size() == got.size());
  const float two_ranks = max_abs_diff(two, got) / max_abs(got);
  MESSAGE(m.shape.model_type << " cpu 2 ranks vs 1: max |d| / max |logit| = " << two_ranks);
  CHECK(two_ranks <= 1e-5f);
}

} // namespace

TEST_CASE("a tiny Mixtral (8 experts, top 2) on the CPU runner equals the plain loops, at 1 and 2 ranks") {
  check_against_plain_loops(random_moe(tiny_mixtral(), 21), expert_storage::mixtral_v4);
}

TEST_CASE(
    "a tiny Qwen2-MoE (top 4 of 8 unnormalized, a gated shared expert) equals the plain loops, at 1 and 2 ranks") {
  check_against_plain_loops(random_moe(tiny_qwen2_moe(), 22), expert_storage::fused);
}

TEST_CASE("a tiny Qwen3-MoE (top 4 of 16, q/k norms) equals the plain loops, at 1 and 2 ranks") {
  check_against_plain_loops(random_moe(tiny_qwen3_moe(), 23), expert_storage::qwen_v4);
}

TEST_CASE("routing matters: renormalizing the top-k weights, or the shared expert's gate, changes the logits") {
  const moe_model m = random_moe(tiny_qwen2_moe(), 24);
  temp_dir dir("troupe_moe_forward");
  write_moe_checkpoint(dir.path, m, expert_storage::fused);
  const model_config cfg = load_model_config(dir.path);
  const model_weights weights = load_model_weights(tensor_store::open(dir.path), cfg);
  cpu_model_runner plain(cfg, weights, cache, 1);
  const std::vector<float> base = runner_logits(plain, cfg.vocab_size);

  model_config normalized = cfg;
  normalized.moe->normalize_top_k = true;
  cpu_model_runner renormalizing(normalized, weights, cache, 1);
  const std::vector<float> other = runner_logits(renormalizing, cfg.vocab_size);
  CHECK(max_abs_diff(base, other) / max_abs(base) > 1e-3f);
  moe_model expected_model = m;
  expected_model.shape.normalize = true;
  CHECK(max_abs_diff(other, moe_reference::logits(expected_model, prompt)) / max_abs(other) <= 1e-4f);

  model_weights half_open = weights; // every token's shared expert scaled by sigmoid(0) = 1/2, not its own gate
  for (layer_weights& l : half_open.layers)
    std::fill(l.shared_expert_gate.begin(), l.shared_expert_gate.end(), 0.0f);
  cpu_model_runner gated(cfg, half_open, cache, 1);
  CHECK(max_abs_diff(base, runner_logits(gated, cfg.vocab_size)) / max_abs(base) > 1e-3f);
}
