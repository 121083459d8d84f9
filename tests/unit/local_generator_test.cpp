// End to end on the bundled model without actors: greedy generation reproduces
// golden_greedy.json token for token, seeded sampling is reproducible and
// independent of the batch, and stop tokens, stop strings and max_tokens end a
// sequence as documented.
#include <doctest/doctest.h>

#include "runtime/errors.hpp"
#include "runtime/local_generator.hpp"
#include "runtime/tokenizer.hpp"
#include "tests/support/stories_model.hpp"

using namespace troupe;
using namespace troupe::testing;
using runtime::token_id;

namespace {
const runtime::tokenizer& stories_tokenizer() {
  static const auto tok = runtime::tokenizer::load(stories_dir());
  return tok;
}

runtime::generation_request request_for(const std::string& prompt, runtime::sampling_params params,
                                        std::uint64_t seed = 0) {
  return {stories_tokenizer().encode(prompt, true), std::move(params), seed};
}

// The model ends stories with BOS (id 1), see models/stories260k/README.md.
const std::vector<token_id> stories_stop_ids{1, 2};
} // namespace

TEST_CASE("greedy generation reproduces all 64 golden tokens of the 5 prompts, in one batch") {
  auto golden = read_json(stories_dir() / "golden_greedy.json");
  std::vector<runtime::generation_request> requests;
  std::vector<std::vector<token_id>> expected;
  std::vector<std::string> expected_text;
  for (const auto& c : golden.at("cases").as_array()) {
    runtime::sampling_params p;
    p.temperature = 0;
    p.max_tokens = 64;
    p.ignore_eos = true;  // the golden run applied no stop token
    requests.push_back({json_array<token_id>(c.at("prompt_ids")), p, 0});
    expected.push_back(json_array<token_id>(c.at("generated_ids")));
    expected_text.emplace_back(c.at("generated_text").as_string());
  }
  REQUIRE(requests.size() == 5);
  auto runner = make_runner(16, 256, 2);
  runtime::local_generator gen(*runner, stories_tokenizer(), stories_stop_ids, {.prefill_chunk = 3});
  std::vector<std::string> streamed(requests.size());
  auto results = gen.run(requests, [&](std::size_t i, std::string_view t) { streamed[i] += t; });
  for (std::size_t i = 0; i < results.size(); ++i) {
    CAPTURE(i);
    CHECK(results[i].output_ids == expected[i]);
    CHECK(results[i].text == expected_text[i]);
    CHECK(streamed[i] == results[i].text);
    CHECK(results[i].reason == runtime::finish_reason::length);
  }
}

TEST_CASE("seeded sampling gives the same output alone and beside other requests") {
  runtime::sampling_params p;
  p.temperature = 1.0f;
  p.top_p = 0.9f;
  p.max_tokens = 40;
  p.seed = 1234;
  auto runner = make_runner(16, 256);
  runtime::local_generator gen(*runner, stories_tokenizer(), stories_stop_ids, {});
  auto alone = gen.run({request_for("The little dog", p)});

  runtime::sampling_params other = p;
  other.seed = 99;
  runtime::sampling_params greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 20;
  auto batched = gen.run({request_for("Once upon a time", other), request_for("The little dog", p),
                          request_for("Tom had a red", greedy)});
  CHECK(batched[1].output_ids == alone[0].output_ids);
  CHECK(batched[1].text == alone[0].text);

  // A different seed gives a different story.
  CHECK(batched[0].output_ids != alone[0].output_ids);
}

TEST_CASE("a stop string ends generation and is not part of the text") {
  runtime::sampling_params p;
  p.temperature = 0;
  p.max_tokens = 64;
  p.ignore_eos = true;
  auto runner = make_runner(16, 64);
  runtime::local_generator gen(*runner, stories_tokenizer(), stories_stop_ids, {});
  // Golden continuation of "Once upon a time": ", there was a little girl named Lily. She loved ..."
  p.stop = {"Lily. She"};
  auto r = gen.run({request_for("Once upon a time", p)});
  CHECK(r[0].reason == runtime::finish_reason::stop);
  CHECK(r[0].text == ", there was a little girl named ");
}

TEST_CASE("the model's stop ids end a story, ignore_eos runs on, max_tokens caps the length") {
  runtime::sampling_params p;
  p.temperature = 0;
  p.max_tokens = 400;
  auto runner = make_runner(16, 128);
  runtime::local_generator gen(*runner, stories_tokenizer(), stories_stop_ids, {});
  auto stopped = gen.run({request_for("Once upon a time", p)});
  REQUIRE_FALSE(stopped[0].output_ids.empty());
  CHECK(stopped[0].reason == runtime::finish_reason::stop);
  CHECK(stopped[0].output_ids.back() == 1);  // BOS: the story is over
  CHECK(stopped[0].output_ids.size() < 400);

  p.ignore_eos = true;
  p.max_tokens = static_cast<int>(stopped[0].output_ids.size()) + 10;
  auto ran_on = gen.run({request_for("Once upon a time", p)});
  CHECK(ran_on[0].reason == runtime::finish_reason::length);
  CHECK(ran_on[0].output_ids.size() == static_cast<std::size_t>(p.max_tokens));

  p.ignore_eos = false;
  p.stop_token_ids = {432};  // ',' is the first golden token
  auto by_extra_id = gen.run({request_for("Once upon a time", p)});
  CHECK(by_extra_id[0].output_ids == std::vector<token_id>{432});
  CHECK(by_extra_id[0].text.empty());
}

TEST_CASE("bad requests are refused with a clear message") {
  auto runner = make_runner(16, 8);
  runtime::local_generator gen(*runner, stories_tokenizer(), stories_stop_ids, {});
  runtime::sampling_params p;
  CHECK_THROWS_WITH_AS(gen.run({{{}, p, 0}}), doctest::Contains("at least one token"),
                       runtime::invalid_argument_error);
  CHECK_THROWS_WITH_AS(gen.run({{{1, 9999}, p, 0}}), doctest::Contains("outside the vocabulary"),
                       runtime::invalid_argument_error);
  std::vector<token_id> too_long(600, 5);
  CHECK_THROWS_WITH_AS(gen.run({{too_long, p, 0}}), doctest::Contains("context"), runtime::invalid_argument_error);
  p.max_tokens = 500;  // 8 blocks of 16 cannot hold it
  CHECK_THROWS_WITH_AS(gen.run({request_for("Hi", p)}), doctest::Contains("blocks"), runtime::invalid_argument_error);
}
