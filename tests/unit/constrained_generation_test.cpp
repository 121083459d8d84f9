// Constrained generation with real models, without actors (runtime::local_generator): over
// random JSON schemas, the bundled model and a random-weight model of its shape write outputs
// that parse and validate (a validator written apart from the compiler) whenever they end
// with a stop, greedy and sampled; regexes and choices the same. Outputs cut by max_tokens are
// prefixes of a sentence (the matcher never leaves the grammar).
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <regex>
#include <string>
#include <vector>

#include "runtime/dummy_weights.hpp"
#include "runtime/local_generator.hpp"
#include "runtime/structured/constraint_cache.hpp"
#include "runtime/structured/sequence_constraint.hpp"
#include "runtime/tokenizer.hpp"
#include "tests/support/json_schema_validator.hpp"
#include "tests/support/random_schema.hpp"
#include "tests/support/stories_model.hpp"
#include "tests/support/sweep.hpp"

using namespace troupe;
using namespace troupe::testing;
using runtime::token_id;

namespace {

const runtime::tokenizer& stories_tokenizer() {
  static const auto tok = runtime::tokenizer::load(stories_dir());
  return tok;
}
const std::vector<token_id> stories_stop_ids{1, 2};

std::unique_ptr<runtime::cpu_model_runner> random_weight_runner() {
  const auto& m = stories_model();
  static const auto weights = runtime::dummy_weights(m.config, 12345);
  return std::make_unique<runtime::cpu_model_runner>(m.config, weights, runtime::kv_cache_config{4096, 16}, 1);
}

runtime::generation_request constrained(output_constraint c, float temperature, std::uint64_t seed, int max_tokens) {
  runtime::sampling_params p;
  p.temperature = temperature;
  p.seed = seed;
  p.max_tokens = max_tokens;
  p.constraint = std::move(c);
  return {stories_tokenizer().encode("Once upon a time, a girl said:", true), p, seed};
}

struct tally {
  int stopped = 0, cut = 0;
};

// Runs every schema's requests through one generator and checks each output.
tally check_schemas(runtime::model_runner& runner, std::uint64_t schema_seed, int schemas, int per_schema) {
  troupe::test::random_schema gen(schema_seed);
  std::vector<boost::json::value> schema_values;
  std::vector<runtime::generation_request> requests;
  for (int s = 0; s < schemas; ++s) {
    auto schema = gen.next();
    for (int k = 0; k < per_schema; ++k)
      requests.push_back(constrained({output_constraint::kind::json_schema, boost::json::serialize(schema), {}},
                                     k == 0 ? 0.0f : 1.0f, static_cast<std::uint64_t>(s * 10 + k), 96));
    schema_values.push_back(std::move(schema));
  }
  runtime::local_generator generator(runner, stories_tokenizer(), stories_stop_ids, {});
  const auto results = generator.run(requests);
  // For the cut outputs: the output so far is still inside the grammar.
  runtime::structured::constraint_cache cache(std::make_shared<const runtime::structured::token_vocabulary>(
      runtime::structured::token_vocabulary::from_tokenizer(stories_tokenizer(), runner.config().vocab_size)));
  tally t;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& schema = schema_values[i / static_cast<std::size_t>(per_schema)];
    INFO("schema " << boost::json::serialize(schema) << "\noutput \"" << results[i].text << "\"");
    if (results[i].reason == runtime::finish_reason::stop) {
      ++t.stopped;
      boost::system::error_code ec;
      const auto value = boost::json::parse(results[i].text, ec);
      REQUIRE_FALSE(ec);
      std::string why;
      CHECK_MESSAGE(troupe::test::validates(schema, value, &why), why);
    } else {
      ++t.cut;
      runtime::structured::sequence_constraint seq(cache.get(requests[i].params.constraint));
      CHECK_FALSE(seq.state_after(results[i].output_ids).dead());
    }
  }
  return t;
}

} // namespace

TEST_CASE("random schemas: the bundled model's stopped outputs parse and validate, cut ones stay inside") {
  auto runner = make_runner(16, 4096, 2);
  const int schemas = sweep_cases(120);
  const auto t = check_schemas(*runner, 42, schemas, 3);
  MESSAGE("bundled model: " << t.stopped << " outputs ended with a stop, " << t.cut << " cut by max_tokens");
  CHECK(t.stopped >= schemas); // most random schemas are small enough to complete in 96 tokens
}

TEST_CASE("random schemas: a random-weight model's outputs the same") {
  auto runner = random_weight_runner();
  const int schemas = sweep_cases(120);
  const auto t = check_schemas(*runner, 7, schemas, 3);
  MESSAGE("random-weight model: " << t.stopped << " outputs ended with a stop, " << t.cut << " cut by max_tokens");
  CHECK(t.stopped >= schemas);
}

TEST_CASE("regex and choice constraints: every stopped output matches, with both models") {
  const std::string pattern = "(Mr|Mrs|Dr)\\. [A-Z][a-z]{0,8}, age [1-9][0-9]?";
  const std::vector<std::string> choices{"red", "green", "blue", "dark blue"};
  for (int model = 0; model < 2; ++model) {
    auto runner = model == 0 ? make_runner(16, 4096, 2) : random_weight_runner();
    std::vector<runtime::generation_request> requests;
    for (std::uint64_t seed = 0; seed < 40; ++seed) {
      requests.push_back(constrained({output_constraint::kind::regex, pattern, {}}, seed == 0 ? 0.0f : 1.0f, seed, 40));
      requests.push_back(
          constrained({output_constraint::kind::choice, {}, choices}, seed == 0 ? 0.0f : 1.0f, seed, 40));
    }
    runtime::local_generator generator(*runner, stories_tokenizer(), stories_stop_ids, {});
    const auto results = generator.run(requests);
    for (std::size_t i = 0; i < results.size(); ++i) {
      INFO("model " << model << " request " << i << ": \"" << results[i].text << "\"");
      // Both languages are finite and short: every output completes.
      REQUIRE(results[i].reason == runtime::finish_reason::stop);
      if (i % 2 == 0)
        CHECK(std::regex_match(results[i].text, std::regex(pattern)));
      else
        CHECK(std::find(choices.begin(), choices.end(), results[i].text) != choices.end());
    }
  }
}
