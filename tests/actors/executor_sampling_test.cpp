// The executor's choice between sampling on the device and on the host, driven through
// the actor with a runner that samples "on its device" in software (the host sampler's
// candidates and draw, from the u the executor sends). A step whose rows need only their
// logits goes to execute_sampled and gives the host path's tokens, seeds included; a row
// with penalties, logprobs or a prompt token to score sends the whole step to the host.
#include <doctest/doctest.h>

#include <atomic>

#include "actors/executor.hpp"
#include "runtime/sampler.hpp"
#include "runtime/step_batch_builder.hpp"
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
  bool samples_on_device() const override { return true; }
  void execute_sampled(const runtime::step_batch& batch, std::span<const runtime::device_sample> rows,
                       std::span<token_id> tokens) override {
    ++device_steps;
    const auto vocab = static_cast<std::size_t>(config().vocab_size);
    std::vector<float> logits(batch.logits_rows.size() * vocab);
    inner_->execute(batch, logits);
    REQUIRE(rows.size() == batch.logits_rows.size());
    runtime::sampler s;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      runtime::sampling_params p;
      p.temperature = rows[i].temperature;
      p.top_k = rows[i].top_k;
      p.top_p = rows[i].top_p;
      p.min_p = rows[i].min_p;
      auto c = s.candidates(std::span<float>(logits).subspan(i * vocab, vocab), p, {}, {});
      tokens[i] = c.ids.size() == 1 ? c.ids[0] : runtime::sampler::draw(c, rows[i].u);
    }
  }
  std::atomic<int> host_steps{0}, device_steps{0};

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

TEST_CASE("executor: penalties, logprobs or a scored prompt send the whole step to the host sampler") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto device_runner = std::make_shared<device_sampling_runner>(stories_runner());
  auto executor = actors::spawn_executor(sys, device_runner);

  auto penalised = sampled(0.0f, 1.0f);
  penalised.repetition_penalty = 1.3f;
  auto with_logprobs = sampled(0.0f, 1.0f);
  with_logprobs.logprobs = 2;
  for (const auto& p : {penalised, with_logprobs}) {
    const std::vector<sample_row> rows{row_of(1, 0, sampled(0.0f, 1.0f), 1), row_of(2, 1, p, 1)};
    auto r = run(sys, executor, prefill_step(rows));
    CHECK(r.error.empty());
    CHECK(r.sampled.size() == 2);
  }
  CHECK(device_runner->host_steps == 2);
  CHECK(device_runner->device_steps == 0);

  // The second sequence scores its prompt: its rows are prompt rows, then one sampled row.
  auto scoring = sampled(0.0f, 1.0f);
  scoring.prompt_logprobs = 0;
  std::vector<sample_row> rows{row_of(1, 0, sampled(0.0f, 1.0f), 1)};
  const auto prompt = story_prompt(20);
  for (int i = 0; i < 19; ++i) {
    auto r = row_of(2, 1 + i, scoring, 1);
    r.score_target = prompt[i + 1];
    rows.push_back(r);
  }
  rows.push_back(row_of(2, 20, scoring, 1));
  auto r = run(sys, executor, prefill_step(rows, true));
  CHECK(r.error.empty());
  CHECK(r.sampled.size() == 21);
  CHECK(device_runner->host_steps == 3);
  CHECK(device_runner->device_steps == 0);
  caf::anon_send_exit(executor, caf::exit_reason::user_shutdown);
}
