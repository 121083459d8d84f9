// The engine's protocols on engine.device=cuda, through the actors, as the CPU
// actor tests drive them: a prefix-cache hit, a cancel mid-stream, speculative
// verification (n-gram and self drafts; greedy, and seeded with the n-gram
// draft; the model drafts run on the GPU too, a dummy-weight draft model among
// them), and recovery from a crashed executor and from failed swap copies. Each run's tokens are checked
// against the same engine without the protocol (no prefix cache, no
// speculation, no faults), and every KV block must come back. In bf16 with
// engine.deterministic, twelve requests agree bit for bit however they are batched. With
// TROUPE_TEST_TENSOR_PARALLEL=N (and CUDA_MODULE_LOADING=EAGER, CUDA_DEVICE_MAX_CONNECTIONS=32) every engine has N ranks on GPU 0.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "tests/support/determinism_workload.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

engine_config cuda_f32() {
  auto c = on_one_gpu(stories_engine_config());
  c.dtype = "float32";
  return c;
}

request_spec ids_spec(std::vector<token_id> ids, int max_tokens) {
  request_spec s;
  s.prompt_ids = std::move(ids);
  s.params.temperature = 0;
  s.params.max_tokens = max_tokens;
  s.params.ignore_eos = true;
  return s;
}

std::vector<std::vector<token_id>> run_all(const engine_config& cfg, const std::vector<request_spec>& specs,
                                           engine_stats* stats_out = nullptr) {
  engine_fixture fx(cfg);
  auto out = fx.run(specs);
  std::vector<std::vector<token_id>> ids;
  for (const auto& o : out) {
    CHECK_MESSAGE(o.finished, o.error.message);
    ids.push_back(o.token_ids);
  }
  auto stats = fx.settled_stats();
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
  CHECK(stats.host_blocks_free == stats.host_blocks_total);
  if (stats_out)
    *stats_out = stats;
  return ids;
}

} // namespace

TEST_CASE("device=cuda: a prompt whose prefix is cached reads it from the cache and gives the same tokens") {
  const auto prefix = story_prompt(96); // six full blocks of 16
  auto first = prefix, second = prefix;
  first.insert(first.end(), {403, 407, 261});
  second.insert(second.end(), {450, 366, 263, 302});
  auto cfg = cuda_f32();
  std::vector<request_outcome> out;
  engine_stats stats;
  {
    engine_fixture fx(cfg);
    out.push_back(fx.run({ids_spec(first, 40)})[0]);
    out.push_back(fx.run({ids_spec(second, 40)})[0]); // after the first: its prefix blocks are indexed
    stats = fx.settled_stats();
  }
  REQUIRE(out[0].finished);
  REQUIRE(out[1].finished);
  CHECK(out[1].final.usage.cached_tokens == 96);
  CHECK(stats.prefix_hits >= 96);
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
  auto uncached = cfg;
  uncached.enable_prefix_caching = false;
  auto expected = run_all(uncached, {ids_spec(first, 40), ids_spec(second, 40)});
  CHECK(out[0].token_ids == expected[0]);
  CHECK(out[1].token_ids == expected[1]);
}

TEST_CASE(
    "device=cuda: a cancel mid-stream ends that request with cancelled, frees its blocks, and nobody else notices") {
  auto cfg = cuda_f32();
  auto doomed = greedy_spec("Once upon a time", 300);
  auto other = greedy_spec("The little dog", 60);
  engine_fixture fx(cfg);
  engine_client client(fx.sys, fx.engine);
  auto id_doomed = client.send(doomed);
  auto id_other = client.send(other);
  client.pump_until([&] { return client.outcomes[id_doomed].token_ids.size() >= 10; });
  caf::anon_send(fx.engine, cancel_atom::value, id_doomed);
  client.pump_until([&] { return client.ended(id_doomed) && client.ended(id_other); });
  const auto& c = client.outcomes[id_doomed];
  REQUIRE(c.finished);
  CHECK(c.final.reason == "cancelled");
  CHECK(c.token_ids.size() < 300);
  REQUIRE(client.outcomes[id_other].finished);
  auto stats = fx.settled_stats();
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
  CHECK(stats.requests_aborted >= 1);
  auto alone = run_all(cfg, {other});
  CHECK(client.outcomes[id_other].token_ids == alone[0]);
}

TEST_CASE("device=cuda: speculative verification gives the tokens of plain decoding, greedy and seeded") {
  // Repetitive prompts: the n-gram drafter finds matches, the self draft (the first layer) agrees often.
  auto repetitive = story_prompt(24);
  auto looped = repetitive;
  for (int i = 0; i < 3; ++i)
    looped.insert(looped.end(), repetitive.begin() + 1, repetitive.end());
  std::vector<request_spec> specs{ids_spec(looped, 80), greedy_spec("Once upon a time", 80),
                                  greedy_spec("Lily wanted to", 80)};
  auto seeded = ids_spec(looped, 80);
  seeded.params.temperature = 0.8f;
  seeded.params.top_p = 0.9f;
  seeded.params.seed = 1234;
  specs.push_back(seeded);

  auto plain_cfg = cuda_f32();
  const auto plain = run_all(plain_cfg, specs);
  for (const char* method : {"ngram", "self"}) {
    CAPTURE(method);
    auto cfg = plain_cfg;
    cfg.speculative_method = method;
    cfg.draft_layers = 3; // of 5: agrees with the model often enough to accept drafts
    cfg.num_speculative_tokens = 3;
    engine_stats stats;
    auto spec = run_all(cfg, specs, &stats);
    // Greedy: exact match for every draft. Seeded: exact for the n-gram draft (no q: the verifier draws as
    // plain decoding does); a model draft's rows go through rejection sampling, which keeps the distribution
    // but not the seeded draws.
    const std::size_t exact = std::string(method) == "ngram" ? specs.size() : specs.size() - 1;
    for (std::size_t i = 0; i < exact; ++i) {
      CAPTURE(i);
      CHECK(spec[i] == plain[i]);
    }
    CHECK(stats.spec_verifications > 0);
    CHECK(stats.spec_accepted > 0);
  }
}

TEST_CASE("device=cuda: a draft model with dummy weights, made on the GPU, leaves greedy output unchanged") {
  // The bundled model's config.json as the draft's, random weights made by the draft's CUDA runner:
  // its drafts are mostly rejected, and every greedy output is still the plain one.
  std::vector<request_spec> specs{greedy_spec("Once upon a time", 60), greedy_spec("Lily wanted to", 60),
                                  ids_spec(story_prompt(40), 60)};
  auto plain_cfg = cuda_f32();
  const auto plain = run_all(plain_cfg, specs);
  auto cfg = plain_cfg;
  cfg.speculative_method = "draft";
  cfg.draft_model = stories_dir().string();
  cfg.draft_load_format = "dummy";
  cfg.num_speculative_tokens = 3;
  engine_stats stats;
  const auto spec = run_all(cfg, specs, &stats);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    CAPTURE(i);
    CHECK(spec[i] == plain[i]);
  }
  CHECK(stats.spec_verifications > 0);
}

TEST_CASE("device=cuda: a crashed executor is restarted on the same GPU runner, a failed swap copy recomputes") {
  const std::vector<const char*> prompts{"Once upon a time", "The little dog",  "Lily wanted to",
                                         "One day, a bird",  "Tom and his mom", "There was a big tree"};
  std::vector<request_spec> specs;
  for (const char* p : prompts)
    specs.push_back(greedy_spec(p, 80));
  auto clean = cuda_f32();
  clean.max_num_seqs = 4;
  clean.num_device_blocks = 12; // two 85-token sequences fill them: swaps all along
  engine_stats clean_stats;
  const auto expected = run_all(clean, specs, &clean_stats);
  REQUIRE(clean_stats.preemptions_swap >= 1);

  SUBCASE("executor crash") {
    auto cfg = clean;
    cfg.crash_executor = 97;
    engine_fixture fx(cfg);
    auto out = fx.run(specs);
    int finished = 0;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      CAPTURE(i);
      CHECK(out[i].finished != out[i].failed);
      if (out[i].finished) {
        ++finished;
        CHECK(out[i].token_ids == expected[i]);
      } else {
        CHECK(out[i].error.code == "step_failed");
      }
    }
    auto stats = fx.settled_stats();
    CHECK(stats.executor_restarts >= 1);
    CHECK(finished >= 2);
    CHECK(stats.device_blocks_free == stats.device_blocks_total);
    CHECK(stats.host_blocks_free == stats.host_blocks_total);
  }
  SUBCASE("swap copy failures") {
    auto cfg = clean;
    cfg.fail_swap_copy = 3;
    engine_stats stats;
    auto out = run_all(cfg, specs, &stats);
    CHECK(out == expected);
    CHECK(stats.swap_copy_failures >= 1);
    CHECK(stats.swap_fallbacks >= 1);
    CHECK(stats.preemptions_swap >= 1);
  }
}

TEST_CASE(
    "device=cuda: n = 4 forks the choices after one prefill; greedy choices are the greedy output, seeded ones "
    "differ") {
  engine_fixture fx([] {
    auto c = cuda_f32();
    c.enable_prefix_caching = false;
    return c;
  }());
  auto greedy = ids_spec(story_prompt(40), 20);
  auto single = fx.run({greedy});
  REQUIRE(single[0].finished);
  greedy.params.n = 4;
  auto sampled = ids_spec(story_prompt(40), 20);
  sampled.params.temperature = 1.0f;
  sampled.params.seed = 5;
  sampled.params.n = 4;
  auto out = fx.run({greedy, sampled});
  REQUIRE(out[0].finished);
  REQUIRE(out[1].finished);
  REQUIRE(out[0].choices.size() == 4);
  REQUIRE(out[1].choices.size() == 4);
  bool all_same = true;
  for (int i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(out[0].choices.at(i).token_ids == single[0].token_ids);
    CHECK(out[1].choices.at(i).token_ids.size() == 20);
    all_same &= out[1].choices.at(i).token_ids == out[1].choices.at(0).token_ids;
  }
  CHECK_FALSE(all_same);
  auto stats = fx.settled_stats();
  // Three prompts of 40: the first computed whole, the other two once up to their last token, which each choice
  // computes.
  CHECK(stats.prefill_tokens == 40 + 2 * (39 + 4));
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
}

TEST_CASE("device=cuda: prompt_logprobs are scored on the GPU and equal the CPU's") {
  request_spec s = ids_spec(story_prompt(30), 5);
  s.params.prompt_logprobs = 3;
  s.params.logprobs = 2;
  engine_fixture gpu(cuda_f32());
  auto on_gpu = gpu.run({s});
  engine_fixture cpu(stories_engine_config());
  auto on_cpu = cpu.run({s});
  REQUIRE(on_gpu[0].finished);
  REQUIRE(on_cpu[0].finished);
  REQUIRE(on_gpu[0].prompt_logprobs.size() == 30);
  REQUIRE(on_cpu[0].prompt_logprobs.size() == 30);
  CHECK(on_gpu[0].token_ids == on_cpu[0].token_ids);
  for (std::size_t i = 1; i < 30; ++i) {
    CAPTURE(i);
    const auto& g = on_gpu[0].prompt_logprobs[i];
    const auto& c = on_cpu[0].prompt_logprobs[i];
    CHECK(g.id == c.id);
    CHECK(std::abs(g.logprob - c.logprob) <= 1e-3f);
    REQUIRE(g.top.size() == 3);
    REQUIRE(c.top.size() == 3);
    CHECK(g.top[0].id == c.top[0].id);
  }
}

TEST_CASE("device=cuda, bfloat16, engine.deterministic: twelve requests alone, together, reversed and mixed agree "
          "bit for bit") {
  const auto specs = determinism_requests();
  auto cfg = on_one_gpu(stories_engine_config());
  cfg.dtype = "bfloat16";
  cfg.deterministic = true;
  cfg.max_num_batched_tokens = 64;
  auto runs = [&](const engine_config& c) {
    engine_fixture fx(c);
    std::vector<std::vector<request_outcome>> out(4);
    for (const auto& s : specs)
      out[0].push_back(fx.run({s})[0]);
    out[1] = fx.run(specs);
    auto reversed = specs;
    std::reverse(reversed.begin(), reversed.end());
    out[2] = fx.run(reversed);
    std::reverse(out[2].begin(), out[2].end());
    out[3] = split_mixed(fx.run(mixed_with_other_traffic(specs)), specs.size()).requests;
    auto stats = fx.settled_stats();
    CHECK(stats.device_blocks_free == stats.device_blocks_total);
    return out;
  };
  const char* how[] = {"alone", "together", "reversed", "mixed"};
  const auto det = runs(cfg);
  for (int r = 1; r < 4; ++r)
    for (std::size_t i = 0; i < specs.size(); ++i) {
      INFO(how[r] << ", request " << i);
      CHECK(first_difference(det[0][i], det[static_cast<std::size_t>(r)][i]) == "");
    }
  // The same engine without the mode, for the record: how many requests differ from alone.
  cfg.deterministic = false;
  const auto plain = runs(cfg);
  int differ = 0;
  for (int r = 1; r < 4; ++r)
    for (std::size_t i = 0; i < specs.size(); ++i)
      differ += first_difference(plain[0][i], plain[static_cast<std::size_t>(r)][i]).empty() ? 0 : 1;
  MESSAGE("stories260k bf16 without engine.deterministic: " << differ << " of 36 runs differ from the request alone");
}
