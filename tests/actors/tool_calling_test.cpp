// Tool calling through the engine's actors on the bundled model (plain chat format, so the
// hermes syntax): with tool_choice required or a named function every reply is calls of the
// offered tools whose arguments validate against their schema (an independent validator),
// greedy and sampled, with n > 1 and with speculation; the reply ends "tool_calls"; a chat
// history of calls and results is served; auto leaves the model free; bad tool requests are
// each the request's error while the engine keeps serving.
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <map>
#include <set>

#include <filesystem>

#include "tests/support/engine_harness.hpp"
#include "tests/support/json_schema_validator.hpp"
#include "tests/support/random_schema.hpp"
#include "tests/support/stories_model.hpp"
#include "tests/support/sweep.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

// The bundled model with a 2048-token context (its config copied with max_position_embeddings
// raised): its tokenizer spends about a token per byte of JSON, so the instructions and two
// tools' schemas take some 450 of its 512. Past 512 its text is worse, which the grammar does
// not mind.
engine_config long_context_config() {
  static const testing::temp_dir dir("troupe_tools_model");
  static const bool copied = [] {
    for (const auto& entry : std::filesystem::directory_iterator(stories_dir()))
      std::filesystem::copy(entry.path(), dir.path / entry.path().filename());
    auto config = read_json(dir.path / "config.json");
    config.as_object()["max_position_embeddings"] = 2048;
    dir.write("config.json", boost::json::serialize(config));
    return true;
  }();
  (void)copied;
  auto c = stories_engine_config();
  c.model_path = dir.path.string();
  return c;
}

const tool_function weather{"weather", "", R"({"type":"object","properties":{"city":{"type":"string","maxLength":6}},
  "required":["city"]})"};
const tool_function ticket{"ticket", "", R"({"type":"object","properties":{"n":{"type":"integer","minimum":1,
  "maximum":99},"ok":{"type":"boolean"}},"required":["n","ok"]})"};

request_spec tool_request(std::vector<tool_function> tools, tool_choice choice, float temperature, std::uint64_t seed,
                          int max_tokens = 200) {
  auto spec = greedy_spec("", max_tokens, /*ignore_eos=*/false);
  spec.messages = {{"user", "Rain in Paris?", {}, {}}};
  spec.tools = std::move(tools);
  spec.choice_of_tool = std::move(choice);
  spec.params.temperature = temperature;
  spec.params.seed = seed;
  return spec;
}

// Every call names an offered tool, has a fresh id and arguments that validate.
void check_calls(const choice_outcome& c, const std::vector<tool_function>& tools, std::set<std::string>& ids) {
  std::map<std::string, boost::json::value> schema_of;
  for (const auto& t : tools)
    schema_of[t.name] = boost::json::parse(t.parameters);
  CHECK(c.misnumbered_calls == 0);
  for (const auto& call : c.tool_calls) {
    INFO(call.name << " " << call.arguments);
    REQUIRE(schema_of.count(call.name) == 1);
    CHECK(call.id.starts_with("call_"));
    CHECK(call.id.size() == 29);
    CHECK(ids.insert(call.id).second);
    boost::system::error_code ec;
    const auto args = boost::json::parse(call.arguments, ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    std::string why;
    CHECK_MESSAGE(test::validates(schema_of[call.name], args, &why), why);
  }
}

} // namespace

TEST_CASE("tool_choice required: every reply is valid calls, greedy, sampled and with n = 3") {
  engine_fixture f(long_context_config());
  const std::vector<tool_function> tools{weather, ticket};
  std::vector<request_spec> specs;
  // One call each (parallel_tool_calls false): the grammar then allows only the end after it.
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    specs.push_back(tool_request(tools, {tool_choice::mode::required, {}}, seed == 1 ? 0.0f : 1.0f, seed));
    specs.back().parallel_tool_calls = false;
  }
  auto several = tool_request(tools, {tool_choice::mode::required, {}}, 1.0f, 7);
  several.parallel_tool_calls = false;
  several.params.n = 3;
  specs.push_back(several);
  // With parallel calls this model never chooses to stop: calls follow calls until max_tokens,
  // and the one it is cut inside comes back as text.
  for (std::uint64_t seed = 1; seed <= 2; ++seed)
    specs.push_back(tool_request(tools, {tool_choice::mode::required, {}}, 1.0f, seed));
  const auto out = f.run(specs);
  std::set<std::string> ids;
  int complete = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    INFO("request " << i << ": text \"" << out[i].text << "\" error " << out[i].error.message);
    REQUIRE(out[i].finished);
    for (const auto& [index, c] : out[i].choices) {
      INFO("choice " << index);
      CHECK(c.finish_deltas == 1);
      check_calls(c, tools, ids);
      if (c.finish_reason == "tool_calls") {
        CHECK_FALSE(c.tool_calls.empty());
        CHECK(c.text.empty()); // the calls' text is not content
        ++complete;
      } else {
        // A call cut by max_tokens is not a call: its text comes back as written.
        CHECK(c.finish_reason == "length");
        CHECK(c.text.find("<tool_call>") != std::string::npos);
      }
    }
  }
  CHECK(complete >= 7);
  for (std::size_t i = specs.size() - 2; i < specs.size(); ++i)
    CHECK(out[i].choices.at(0).tool_calls.size() >= 2);
  const auto s = f.settled_stats();
  CHECK(s.constrained_requests == specs.size());
}

TEST_CASE("a named function is called exactly once, and parallel_tool_calls false allows one call") {
  engine_fixture f(long_context_config());
  const std::vector<tool_function> tools{weather, ticket};
  std::vector<request_spec> specs;
  for (std::uint64_t seed = 1; seed <= 4; ++seed)
    specs.push_back(tool_request(tools, {tool_choice::mode::function, "ticket"}, 1.0f, seed));
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    auto one = tool_request(tools, {tool_choice::mode::required, {}}, 1.0f, seed);
    one.parallel_tool_calls = false;
    specs.push_back(one);
  }
  const auto out = f.run(specs);
  std::set<std::string> ids;
  for (std::size_t i = 0; i < out.size(); ++i) {
    INFO("request " << i);
    REQUIRE(out[i].finished);
    const auto& c = out[i].choices.at(0);
    check_calls(c, tools, ids);
    if (c.finish_reason != "tool_calls")
      continue;
    REQUIRE(c.tool_calls.size() == 1);
    if (i < 4)
      CHECK(c.tool_calls[0].name == "ticket");
  }
}

TEST_CASE("random argument schemas: required calls validate against them") {
  engine_fixture f(long_context_config());
  test::random_schema schemas(77);
  std::vector<std::vector<tool_function>> tool_sets;
  std::vector<request_spec> specs;
  // 16 (the grammar tests derive from 500): each prompt carries its schema, up to 2,000 tokens
  // on this byte-sized vocabulary, which makes these the slowest requests of the suite.
  const int requests = sweep_cases(16);
  for (int i = 0; i < requests; ++i) {
    tool_sets.push_back({{"t", "", boost::json::serialize(schemas.next())}});
    specs.push_back(tool_request(tool_sets.back(), {tool_choice::mode::required, {}}, 1.0f, 100 + i, 300));
  }
  const auto out = f.run(specs);
  std::set<std::string> ids;
  int served = 0, calls = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    INFO("request " << i << ": " << out[i].error.message);
    // A large schema's prompt may not fit even 2048 tokens.
    if (out[i].failed) {
      CHECK(out[i].error.code == "prompt_too_long");
      continue;
    }
    REQUIRE(out[i].finished);
    ++served;
    check_calls(out[i].choices.at(0), tool_sets[i], ids);
    calls += static_cast<int>(out[i].choices.at(0).tool_calls.size());
  }
  CHECK(served >= 3 * requests / 4);
  CHECK(calls >= requests / 2);
}

TEST_CASE("speculation keeps required tool calls exact (greedy) and valid (sampled)") {
  const std::vector<tool_function> tools{weather, ticket};
  const std::vector<request_spec> greedy{tool_request(tools, {tool_choice::mode::required, {}}, 0.0f, 1)};
  std::vector<tool_call> reference;
  {
    engine_fixture plain(long_context_config());
    reference = plain.run(greedy)[0].choices.at(0).tool_calls;
  }
  REQUIRE_FALSE(reference.empty());
  for (const std::string method : {"ngram", "draft"}) {
    INFO(method);
    auto cfg = long_context_config();
    cfg.speculative_method = method;
    cfg.num_speculative_tokens = 3;
    cfg.draft_model = stories_dir().string();
    engine_fixture spec(cfg);
    const auto out = spec.run(greedy)[0].choices.at(0).tool_calls;
    REQUIRE(out.size() == reference.size());
    for (std::size_t i = 0; i < out.size(); ++i) {
      CHECK(out[i].name == reference[i].name);
      CHECK(out[i].arguments == reference[i].arguments);
    }
    std::vector<request_spec> sampled;
    for (std::uint64_t seed = 1; seed <= 3; ++seed)
      sampled.push_back(tool_request(tools, {tool_choice::mode::required, {}}, 1.0f, seed));
    std::set<std::string> ids;
    for (const auto& o : spec.run(sampled)) {
      REQUIRE(o.finished);
      check_calls(o.choices.at(0), tools, ids);
    }
  }
}

TEST_CASE("a history of calls and results is served, and tool_choice auto and none leave the text free") {
  engine_fixture f(long_context_config());
  auto history = tool_request({weather}, {tool_choice::mode::automatic, {}}, 0.0f, 1, 24);
  history.messages.push_back({"assistant", "", {{"call_1", "weather", R"({"city":"Paris"})"}}, {}});
  history.messages.push_back({"tool", "{\"rain\": true}", {}, "call_1"});
  auto none = tool_request({weather}, {tool_choice::mode::none, {}}, 0.0f, 1, 24);
  // The same text as a chat with no tools at all: none does not render them.
  auto bare = tool_request({}, {}, 0.0f, 1, 24);
  const auto out = f.run({history, none, bare});
  for (const auto& o : out)
    REQUIRE(o.finished);
  // The tiny model writes stories, not calls: auto gives its text, ended by "stop" or "length".
  CHECK(out[0].choices.at(0).tool_calls.empty());
  CHECK_FALSE(out[0].text.empty());
  CHECK(out[0].final.reason != "tool_calls");
  CHECK(out[1].text == out[2].text);
  CHECK(out[1].final.usage.prompt_tokens == out[2].final.usage.prompt_tokens);
  CHECK(out[0].final.usage.prompt_tokens > out[2].final.usage.prompt_tokens);
}

TEST_CASE("bad tool requests are each the request's error and the engine keeps serving") {
  engine_fixture f(long_context_config());
  std::vector<std::pair<request_spec, std::string>> bad;
  bad.push_back({tool_request({weather}, {tool_choice::mode::function, "nope"}, 0.0f, 1), "not among the tools"});
  bad.push_back({tool_request({}, {tool_choice::mode::required, {}}, 0.0f, 1), "needs tools"});
  bad.push_back({tool_request({weather, weather}, {}, 0.0f, 1), "used twice"});
  bad.push_back({tool_request({{"bad name!", "", "{}"}}, {}, 0.0f, 1), "must be 1 to 64"});
  bad.push_back({tool_request({{"f", "", R"({"type":"object","properties":{"a":{"not":{}}}})"}},
                              {tool_choice::mode::required, {}}, 0.0f, 1),
                 "tool \"f\""});
  bad.push_back({tool_request({{"f", "", "[1, 2]"}}, {}, 0.0f, 1), "must be a JSON object"});
  auto both = tool_request({weather}, {tool_choice::mode::required, {}}, 0.0f, 1);
  both.params.constraint = {output_constraint::kind::json_object, {}, {}};
  bad.push_back({both, "cannot be combined"});
  auto not_chat = greedy_spec("Once", 8, false);
  not_chat.tools = {weather};
  bad.push_back({not_chat, "only taken with a chat"});
  std::vector<request_spec> specs;
  for (const auto& [spec, _] : bad)
    specs.push_back(spec);
  specs.push_back(tool_request({weather}, {tool_choice::mode::required, {}}, 0.0f, 1));
  specs.back().parallel_tool_calls = false;
  const auto out = f.run(specs);
  for (std::size_t i = 0; i < bad.size(); ++i) {
    INFO("bad request " << i << " (" << bad[i].second << ")");
    REQUIRE(out[i].failed);
    CHECK(out[i].error.code == "invalid_request");
    CHECK_MESSAGE(out[i].error.message.find(bad[i].second) != std::string::npos, out[i].error.message);
  }
  REQUIRE(out.back().finished);
  CHECK(out.back().final.reason == "tool_calls");
}
