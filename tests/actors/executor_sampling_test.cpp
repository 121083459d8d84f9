// The executor's choice between sampling on the device and on the host, driven through
// the actor with a runner that samples "on its device" in software (runtime::sample_on_host,
// the device sampler's reference, from the rows the executor sends). A step of sampled rows
// goes to execute_sampled, penalties and logprobs included, and gives the host path's tokens
// and log-probabilities, seeds included: so the rows carry the right history, prompt length
// and draw. Prompt rows are scored there too; rows that do not fit the device send the whole
// step to the host. A constrained row's mask is made in execute_sampled's before_draw, after
// the forward pass.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>

#include "actors/executor.hpp"
#include "runtime/device_sampling.hpp"
#include "runtime/sampler.hpp"
#include "runtime/step_batch_builder.hpp"
#include "runtime/structured/constraint_cache.hpp"
#include "runtime/tokenizer.hpp"
#include "tests/support/engine_harness.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

// The CPU runner, plus sampling "on the device": what a GPU runner does, done on the host.
class device_sampling_runner final : public runtime::model_runner {
 public:
  explicit device_sampling_runner(std::shared_ptr<runtime::cpu_model_runner> inner) : inner_(std::move(inner)) {}
  const runtime::model_config& config() const override { return inner_->config(); }
  const runtime::kv_cache_config& cache_config() const override { return inner_->cache_config(); }
  void execute(const runtime::step_batch& batch, std::span<float> logits) override {
    ++host_steps;
    inner_->execute(batch, logits);
  }
  void copy_blocks(runtime::kv_copy kind, std::span<const runtime::block_copy> pairs) override {
    inner_->copy_blocks(kind, pairs);
  }
  std::size_t block_bytes() const override { return inner_->block_bytes(); }
  bool samples_on_device(std::span<const runtime::device_sample> rows) const override {
    return rows.size() <= max_rows;
  }
  void execute_sampled(const runtime::step_batch& batch, std::span<const runtime::device_sample> rows,
                       std::span<token_id> tokens, std::span<runtime::token_logprobs> logprobs,
                       const std::function<void()>& before_draw) override {
    ++device_steps;
    const auto vocab = static_cast<std::size_t>(config().vocab_size);
    std::vector<float> logits(batch.logits_rows.size() * vocab);
    inner_->execute(batch, logits);
    // As a device runner: the caller finishes its rows after the forward pass, before the draw.
    for (const auto& r : rows)
      unfinished_constrained_rows += r.constrained && r.edits.banned.empty() ? 1 : 0;
    if (before_draw)
      before_draw();
    for (const auto& r : rows)
      finished_constrained_rows += r.constrained && !r.edits.banned.empty() ? 1 : 0;
    REQUIRE(rows.size() == batch.logits_rows.size());
    runtime::sample_on_host(logits, config().vocab_size, rows, tokens, logprobs);
  }
  std::atomic<int> host_steps{0}, device_steps{0};
  std::atomic<int> unfinished_constrained_rows{0}, finished_constrained_rows{0};
  std::size_t max_rows = 1000; // what the "device" can take

 private:
  std::shared_ptr<runtime::cpu_model_runner> inner_;
};

std::shared_ptr<runtime::cpu_model_runner> stories_runner() {
  const auto& m = stories_model();
  return std::make_shared<runtime::cpu_model_runner>(m.config, m.weights, runtime::kv_cache_config{16, 16, 0}, 1);
}

// Two sequences' prefill: blocks 0-3 and 4-7, one logits row each (or every prompt row of the second).
step_request prefill_step(const std::vector<sample_row>& rows, bool score_second_prompt = false) {
  const auto prompt = story_prompt(20);
  runtime::step_batch_builder b(16, 4);
  const std::vector<std::int32_t> table_a{0, 1, 2, 3}, table_b{4, 5, 6, 7};
  b.add(prompt, 0, table_a, 1);
  b.add(prompt, 0, table_b, score_second_prompt ? static_cast<int>(prompt.size()) : 1);
  step_request req;
  req.batch = b.take(1);
  req.seq_ids = {1, 2};
  req.reset_ids = {1, 2};
  req.reset_tokens = {{}, {}};
  req.rows = rows;
  return req;
}

sample_row row_of(seq_id id, std::int32_t logits_index, runtime::sampling_params p, std::uint64_t seed) {
  sample_row r;
  r.id = id;
  r.params = std::move(p);
  r.seed = seed;
  r.step = 0;
  r.prompt_len = 20;
  r.logits_index = logits_index;
  return r;
}

step_result run(caf::actor_system& sys, executor_actor executor, step_request req) {
  caf::scoped_actor self{sys};
  step_result out;
  self->request(executor, caf::infinite, run_step_atom::value, std::move(req))
      .receive([&](step_result& r) { out = std::move(r); }, [&](caf::error& e) { FAIL(to_string(e)); });
  return out;
}

runtime::sampling_params sampled(float temperature, float top_p, int top_k = 0) {
  runtime::sampling_params p;
  p.temperature = temperature;
  p.top_p = top_p;
  p.top_k = top_k;
  return p;
}

} // namespace

TEST_CASE("executor: a step of plain rows is sampled on the device and gives the host's tokens") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto device_runner = std::make_shared<device_sampling_runner>(stories_runner());
  auto device_executor = actors::spawn_executor(sys, device_runner);
  auto host_executor = actors::spawn_executor(sys, stories_runner());

  // A greedy row and a seeded top-p / top-k row, for several seeds.
  for (std::uint64_t seed : {1u, 2u, 3u, 40u, 41u}) {
    CAPTURE(seed);
    const std::vector<sample_row> rows{row_of(1, 0, sampled(0.0f, 1.0f), seed),
                                       row_of(2, 1, sampled(1.2f, 0.9f, 40), seed)};
    const int before = device_runner->device_steps;
    auto on_device = run(sys, device_executor, prefill_step(rows));
    auto on_host = run(sys, host_executor, prefill_step(rows));
    CHECK(device_runner->device_steps == before + 1);
    CHECK(on_device.error.empty());
    REQUIRE(on_device.sampled.size() == 2);
    CHECK(on_device.sampled == on_host.sampled);
  }
  CHECK(device_runner->host_steps == 0);
  caf::anon_send_exit(device_executor, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(host_executor, caf::exit_reason::user_shutdown);
}

TEST_CASE("executor: penalties and logprobs are sampled on the device and match the host's") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto device_runner = std::make_shared<device_sampling_runner>(stories_runner());
  auto device_executor = actors::spawn_executor(sys, device_runner);
  auto host_executor = actors::spawn_executor(sys, stories_runner());

  auto penalised = sampled(0.9f, 1.0f);
  penalised.repetition_penalty = 1.3f;
  penalised.frequency_penalty = 0.4f;
  penalised.presence_penalty = 0.3f;
  auto with_logprobs = sampled(0.0f, 1.0f);
  with_logprobs.logprobs = 3;
  auto both = penalised;
  both.logprobs = 5;
  for (const auto& p : {penalised, with_logprobs, both})
    for (std::uint64_t seed : {5u, 6u, 7u}) {
      CAPTURE(seed);
      // Prefill, then two decode steps whose histories hold output tokens (the frequency penalty's counts).
      const std::vector<sample_row> rows{row_of(1, 0, sampled(0.0f, 1.0f), seed), row_of(2, 1, p, seed)};
      auto on_device = run(sys, device_executor, prefill_step(rows));
      auto on_host = run(sys, host_executor, prefill_step(rows));
      REQUIRE(on_device.error.empty());
      CHECK(on_device.sampled == on_host.sampled);
      std::vector<token_id> out_a{on_host.sampled[0]}, out_b{on_host.sampled[1]};
      for (int step = 1; step <= 2; ++step) {
        CAPTURE(step);
        auto decode = [&] {
          runtime::step_batch_builder b(16, 4);
          const std::vector<std::int32_t> table_a{0, 1, 2, 3}, table_b{4, 5, 6, 7};
          const int len = 20 + step - 1;
          b.add(std::span<const token_id>(&out_a.back(), 1), len, table_a, 1);
          b.add(std::span<const token_id>(&out_b.back(), 1), len, table_b, 1);
          step_request req;
          req.batch = b.take(static_cast<std::uint64_t>(step) + 1);
          req.seq_ids = {1, 2};
          auto first = row_of(1, 0, sampled(0.0f, 1.0f), seed), second = row_of(2, 1, p, seed);
          first.step = second.step = static_cast<std::uint64_t>(step);
          req.rows = {first, second};
          return req;
        };
        auto d = run(sys, device_executor, decode());
        auto h = run(sys, host_executor, decode());
        REQUIRE(d.error.empty());
        CHECK(d.sampled == h.sampled);
        REQUIRE(d.logprobs.size() == h.logprobs.size());
        for (std::size_t i = 0; i < d.logprobs.size(); ++i) {
          CHECK(d.logprobs[i].token == h.logprobs[i].token);
          CHECK(d.logprobs[i].logprob == h.logprobs[i].logprob);
          CHECK(d.logprobs[i].top_ids == h.logprobs[i].top_ids);
        }
        if (p.logprobs >= 0) {
          REQUIRE(d.logprobs.size() == 2);
          CHECK(d.logprobs[1].top_ids.size() == static_cast<std::size_t>(p.logprobs));
        }
        out_a.push_back(h.sampled[0]);
        out_b.push_back(h.sampled[1]);
      }
    }
  CHECK(device_runner->host_steps == 0);
  CHECK(device_runner->device_steps == 27);
  caf::anon_send_exit(device_executor, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(host_executor, caf::exit_reason::user_shutdown);
}

TEST_CASE("executor: rows the device cannot take send the whole step to the host sampler") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto device_runner = std::make_shared<device_sampling_runner>(stories_runner());
  auto executor = actors::spawn_executor(sys, device_runner);
  device_runner->max_rows = 1;
  auto r0 =
      run(sys, executor, prefill_step({row_of(1, 0, sampled(0.0f, 1.0f), 1), row_of(2, 1, sampled(0.0f, 1.0f), 1)}));
  CHECK(r0.error.empty());
  CHECK(r0.sampled.size() == 2);
  CHECK(device_runner->host_steps == 1);
  CHECK(device_runner->device_steps == 0);
  caf::anon_send_exit(executor, caf::exit_reason::user_shutdown);
}

TEST_CASE("executor: a scored prompt is scored on the device, with the host's tokens and logprobs") {
  // The second sequence scores its prompt: its rows are prompt rows, then one sampled row.
  auto scoring = sampled(0.8f, 0.9f);
  scoring.prompt_logprobs = 3;
  scoring.logprobs = 2;
  std::vector<sample_row> rows{row_of(1, 0, sampled(0.0f, 1.0f), 1)};
  const auto prompt = story_prompt(20);
  for (int i = 0; i < 19; ++i) {
    auto r = row_of(2, 1 + i, scoring, 7);
    r.score_target = prompt[i + 1];
    rows.push_back(r);
  }
  rows.push_back(row_of(2, 20, scoring, 7));
  std::vector<step_result> results;
  for (std::size_t max_rows : {1000, 0}) { // the device, then the host
    caf::actor_system_config cfg;
    caf::actor_system sys{cfg};
    auto device_runner = std::make_shared<device_sampling_runner>(stories_runner());
    device_runner->max_rows = max_rows;
    auto executor = actors::spawn_executor(sys, device_runner);
    results.push_back(run(sys, executor, prefill_step(rows, true)));
    CHECK(results.back().error.empty());
    CHECK(device_runner->device_steps == (max_rows > 0 ? 1 : 0));
    CHECK(device_runner->host_steps == (max_rows > 0 ? 0 : 1));
    caf::anon_send_exit(executor, caf::exit_reason::user_shutdown);
  }
  const auto& device = results[0];
  const auto& host = results[1];
  REQUIRE(device.sampled.size() == 21);
  CHECK(device.sampled == host.sampled);
  for (int i = 0; i < 19; ++i)
    CHECK(device.sampled[static_cast<std::size_t>(1 + i)] == prompt[static_cast<std::size_t>(i + 1)]);
  REQUIRE(device.logprobs.size() == 21);
  REQUIRE(host.logprobs.size() == 21);
  for (std::size_t i = 1; i < 21; ++i) {
    CAPTURE(i);
    CHECK(device.logprobs[i].token == host.logprobs[i].token);
    CHECK(std::abs(device.logprobs[i].logprob - host.logprobs[i].logprob) <= 1e-6f);
    CHECK(device.logprobs[i].top_ids == host.logprobs[i].top_ids);
    CHECK(device.logprobs[i].top_ids.size() == (i < 20 ? 3u : 2u));
  }
}

TEST_CASE("executor: logit_bias and min_tokens arrive with the reset and apply on the device and on the host") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto device_runner = std::make_shared<device_sampling_runner>(stories_runner());
  auto device_executor = actors::spawn_executor(sys, device_runner);
  auto host_executor = actors::spawn_executor(sys, stories_runner());

  const std::vector<sample_row> greedy{row_of(1, 0, sampled(0.0f, 1.0f), 1), row_of(2, 1, sampled(0.0f, 1.0f), 1)};
  const auto plain = run(sys, host_executor, prefill_step(greedy));
  REQUIRE(plain.sampled.size() == 2);
  // Sequence 1: +100 on a token that is not its greedy choice. Sequence 2: its greedy choice is
  // a stop id, banned while the output is shorter than min_tokens = 2 (output index 0 and 1).
  const token_id forced = plain.sampled[0] == 77 ? 78 : 77;
  auto biased = sampled(0.0f, 1.0f);
  biased.logit_bias = {{forced, 100.0f}};
  auto at_least_two = sampled(0.0f, 1.0f);
  at_least_two.min_tokens = 2;
  const std::vector<token_id> stops{plain.sampled[1]};
  auto with_rules = [&](std::uint64_t output_index) {
    auto first = row_of(1, 0, biased, 1), second = row_of(2, 1, at_least_two, 1);
    first.step = second.step = output_index;
    auto req = prefill_step({first, second});
    req.reset_rules = {runtime::logit_rules_for(biased, stops), runtime::logit_rules_for(at_least_two, stops)};
    return req;
  };
  for (std::uint64_t index : {0u, 1u, 2u}) {
    CAPTURE(index);
    auto on_device = run(sys, device_executor, with_rules(index));
    auto on_host = run(sys, host_executor, with_rules(index));
    REQUIRE(on_device.error.empty());
    REQUIRE(on_host.error.empty());
    CHECK(on_device.sampled == on_host.sampled);
    CHECK(on_host.sampled[0] == forced);
    if (index < 2)
      CHECK(on_host.sampled[1] != plain.sampled[1]);
    else
      CHECK(on_host.sampled[1] == plain.sampled[1]); // min_tokens reached: the stop id is back
  }
  // A reset without rules drops them.
  auto cleared = run(sys, host_executor, prefill_step(greedy));
  CHECK(cleared.sampled == plain.sampled);
  CHECK(device_runner->host_steps == 0);
  caf::anon_send_exit(device_executor, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(host_executor, caf::exit_reason::user_shutdown);
}

TEST_CASE(
    "executor: verifications decided by the target's draws run on the device and emit the host verifier's tokens") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto device_runner = std::make_shared<device_sampling_runner>(stories_runner());
  auto device_executor = actors::spawn_executor(sys, device_runner);
  auto host_executor = actors::spawn_executor(sys, stories_runner());

  auto penalised = sampled(0.9f, 0.95f);
  penalised.repetition_penalty = 1.2f;
  penalised.frequency_penalty = 0.3f;
  penalised.min_tokens = 3;
  for (const auto& p : {sampled(0.0f, 1.0f), penalised}) {
    CAPTURE(p.temperature);
    const std::uint64_t seed = 11;
    const std::vector<sample_row> first{row_of(1, 0, p, seed), row_of(2, 1, sampled(0.0f, 1.0f), seed)};
    auto prefill = [&] {
      auto req = prefill_step(first);
      // Sequence 1's stop ids include 5, masked by min_tokens = 3 (output indices 1 and 2 below).
      req.reset_rules = {runtime::logit_rules_for(p, std::vector<token_id>{5}), {}};
      return req;
    };
    auto on_device = run(sys, device_executor, prefill());
    auto on_host = run(sys, host_executor, prefill());
    REQUIRE(on_device.sampled == on_host.sampled);
    const token_id last_a = on_host.sampled[0], last_b = on_host.sampled[1];
    // Sequence 1 verifies 3 drafts (4 logits rows), sequence 2 decodes one row. Each round's draft
    // keeps what the last round emitted and guesses the rest, so rejection at every index and full
    // acceptance (bonus) are all met.
    std::vector<token_id> known;
    for (int round = 0; round < 4; ++round) {
      CAPTURE(round);
      std::vector<token_id> draft = known;
      while (draft.size() < 3)
        draft.push_back(static_cast<token_id>(400 + draft.size()));
      auto spec_step = [&] {
        runtime::step_batch_builder b(16, 4);
        const std::vector<std::int32_t> table_a{0, 1, 2, 3}, table_b{4, 5, 6, 7};
        std::vector<token_id> query{last_a};
        query.insert(query.end(), draft.begin(), draft.end());
        b.add(query, 20, table_a, 4);
        b.add(std::span<const token_id>(&last_b, 1), 20, table_b, 1);
        step_request req;
        req.batch = b.take(static_cast<std::uint64_t>(round) + 2);
        req.seq_ids = {1, 2};
        auto decode = row_of(2, 4, sampled(0.0f, 1.0f), seed);
        decode.step = 1;
        req.rows = {decode};
        req.verify = {{1, 0, draft, {}, p, seed, 1, 20}};
        return req;
      };
      const int device_steps = device_runner->device_steps;
      auto d = run(sys, device_executor, spec_step());
      auto h = run(sys, host_executor, spec_step());
      REQUIRE(d.error.empty());
      CHECK(device_runner->device_steps == device_steps + 1);
      CHECK(d.sampled == h.sampled);
      REQUIRE(d.verified.size() == 1);
      CHECK(d.verified == h.verified);
      for (std::size_t i = 0; i + 1 < h.verified[0].size() && i < 2; ++i)
        if (p.min_tokens > 0)
          CHECK(h.verified[0][i] != 5);
      known.assign(h.verified[0].begin(), h.verified[0].begin() + std::min<std::size_t>(3, h.verified[0].size()));
      if (round == 3)
        CHECK(h.verified[0].size() == 4); // every draft kept, plus the bonus
    }
  }
  // A sampling draft with probabilities needs the residual distribution: the host verifies it.
  auto p = sampled(0.8f, 1.0f);
  auto req = prefill_step({row_of(1, 0, p, 3), row_of(2, 1, p, 3)});
  run(sys, device_executor, std::move(req));
  const int host_steps = device_runner->host_steps;
  runtime::step_batch_builder b(16, 4);
  const std::vector<std::int32_t> table_a{0, 1, 2, 3};
  const std::vector<token_id> query{7, 8};
  b.add(query, 20, table_a, 2);
  step_request spec;
  spec.batch = b.take(9);
  spec.seq_ids = {1};
  std::vector<float> q(static_cast<std::size_t>(stories_model().config.vocab_size), 0.0f);
  q[8] = 1.0f;
  spec.verify = {{1, 0, {8}, q, p, 3, 1, 20}};
  auto r = run(sys, device_executor, std::move(spec));
  CHECK(r.error.empty());
  CHECK(device_runner->host_steps == host_steps + 1);
  caf::anon_send_exit(device_executor, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(host_executor, caf::exit_reason::user_shutdown);
}

TEST_CASE("executor: a constrained row's mask is made after the forward pass, before the draw, and equals the host's") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  static const auto tok = runtime::tokenizer::load(stories_dir());
  auto vocab = std::make_shared<const runtime::structured::token_vocabulary>(
      runtime::structured::token_vocabulary::from_tokenizer(tok, stories_model().config.vocab_size));
  auto constraints = std::make_shared<runtime::structured::constraint_cache>(vocab);
  auto device_runner = std::make_shared<device_sampling_runner>(stories_runner());
  auto device_executor = actors::spawn_executor(sys, device_runner, nullptr, constraints);
  auto host_executor = actors::spawn_executor(sys, stories_runner(), nullptr, constraints);

  auto choice = sampled(1.0f, 1.0f);
  choice.constraint = {output_constraint::kind::choice, {}, {"zebra", "yak"}};
  const std::vector<token_id> stops{2};
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    CAPTURE(seed);
    auto step = [&] {
      auto req = prefill_step({row_of(1, 0, choice, seed), row_of(2, 1, sampled(0.0f, 1.0f), seed)});
      req.reset_rules = {runtime::logit_rules_for(choice, stops), {}};
      return req;
    };
    const int unfinished = device_runner->unfinished_constrained_rows;
    const int finished = device_runner->finished_constrained_rows;
    auto on_device = run(sys, device_executor, step());
    auto on_host = run(sys, host_executor, step());
    REQUIRE(on_device.error.empty());
    CHECK(on_device.sampled == on_host.sampled);
    // Row 0 had no mask when the runner got the rows, and had it when it drew.
    CHECK(device_runner->unfinished_constrained_rows == unfinished + 1);
    CHECK(device_runner->finished_constrained_rows == finished + 1);
    const token_id first[] = {on_device.sampled[0]};
    const auto text = tok.decode(first);
    CHECK_MESSAGE((std::string_view("zebra").starts_with(text) || std::string_view("yak").starts_with(text)), text);
    CHECK(on_device.constraint_us > 0);
  }
  CHECK(device_runner->host_steps == 0);
  caf::anon_send_exit(device_executor, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(host_executor, caf::exit_reason::user_shutdown);
}
