// troupe-bench's workload and arrivals: lengths stay in the range, a seed gives the
// same workload again, the shared prefix is the same text everywhere, prompts have the
// asked number of tokens with the served tokenizer (runtime's, playing the server's),
// Poisson gaps average 1/rate, the priority mix holds its proportions; and the requests
// sent ask for what was built.
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <stdexcept>

#include "apps/troupe-bench/load/arrival_schedule.hpp"
#include "apps/troupe-bench/load/endpoint.hpp"
#include "apps/troupe-bench/load/request_body.hpp"
#include "apps/troupe-bench/load/workload.hpp"
#include "runtime/tokenizer.hpp"
#include "tests/support/stories_model.hpp"

using namespace troupe::bench;

namespace {

const troupe::runtime::tokenizer& stories() {
  static const auto t = troupe::runtime::tokenizer::load(troupe::testing::stories_dir());
  return t;
}

// What troupe-serve does for /tokenize (no special tokens) and /detokenize, with the bundled model.
class stories_codec final : public token_codec {
 public:
  std::vector<token_id> encode(const std::string& text) override { return stories().encode(text, false); }
  std::string decode(const std::vector<token_id>& ids) override { return stories().decode(ids, true); }
};

std::vector<bench_request> build(const workload_options& o) {
  stories_codec codec;
  prompt_generator prompts(codec, 512);
  return build_workload(o, prompts);
}

int tokens_of(const std::string& text) {
  return static_cast<int>(stories().encode(text, false).size());
}

double mean_of(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / v.size();
}

} // namespace

TEST_CASE("input and output lengths stay within the range ratio and cover it") {
  workload_options o;
  o.num_prompts = 2000;
  o.input_len = 100;
  o.output_len = 40;
  o.range_ratio = 0.5;
  auto requests = build(o);
  REQUIRE(requests.size() == 2000);
  int in_lo = 1000, in_hi = 0, out_lo = 1000, out_hi = 0;
  for (const auto& r : requests) {
    CHECK(r.prompt_len >= 50);
    CHECK(r.prompt_len <= 150);
    CHECK(r.max_tokens >= 20);
    CHECK(r.max_tokens <= 60);
    CHECK(tokens_of(r.prompt) == r.prompt_len);
    in_lo = std::min(in_lo, r.prompt_len);
    in_hi = std::max(in_hi, r.prompt_len);
    out_lo = std::min(out_lo, r.max_tokens);
    out_hi = std::max(out_hi, r.max_tokens);
  }
  // Both ends are inclusive, as in vLLM's random dataset.
  CHECK(in_lo == 50);
  CHECK(in_hi == 150);
  CHECK(out_lo == 20);
  CHECK(out_hi == 60);

  o.range_ratio = 0;
  for (const auto& r : build(o)) {
    CHECK(r.prompt_len == 100);
    CHECK(r.max_tokens == 40);
  }
}

TEST_CASE("the same seed builds the same workload and another seed a different one") {
  workload_options o;
  o.num_prompts = 50;
  o.range_ratio = 0.3;
  o.priority_mix = parse_priority_mix("0:0.5,1:0.5");
  o.seed = 42;
  auto a = build(o), b = build(o);
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].prompt == b[i].prompt);
    CHECK(a[i].max_tokens == b[i].max_tokens);
    CHECK(a[i].priority == b[i].priority);
  }
  o.seed = 43;
  auto c = build(o);
  int same = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    same += a[i].prompt == c[i].prompt;
  CHECK(same == 0);
}

TEST_CASE("the shared prefix is the same text in every prompt and the rest differs") {
  workload_options o;
  o.num_prompts = 20;
  o.input_len = 30;
  o.shared_prefix_len = 100;
  auto requests = build(o);
  const auto first = stories().encode(requests[0].prompt, false);
  const std::vector<token_id> prefix(first.begin(), first.begin() + 100);
  const auto starts_with_prefix = [&prefix](const std::string& prompt) {
    auto ids = stories().encode(prompt, false);
    return ids.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), ids.begin());
  };
  std::set<std::string> prompts;
  for (const auto& r : requests) {
    CHECK(r.prompt_len == 130);
    CHECK(tokens_of(r.prompt) == 130);
    CHECK(starts_with_prefix(r.prompt));
    prompts.insert(r.prompt);
  }
  CHECK(prompts.size() == requests.size());

  // Warm-ups draw their own prompts but keep the prefix when given its seed.
  auto w = o;
  w.seed = ~o.seed;
  CHECK_FALSE(starts_with_prefix(build(w)[0].prompt));
  w.prefix_seed = o.seed;
  auto warmup = build(w);
  CHECK(starts_with_prefix(warmup[0].prompt));
  CHECK(warmup[0].prompt != requests[0].prompt);
}

TEST_CASE("prompts have the asked number of tokens with the served tokenizer, and prompt i keeps its text") {
  workload_options o;
  o.num_prompts = 30;
  o.input_len = 64;
  o.range_ratio = 0.5;
  o.shared_prefix_len = 17;
  auto requests = build(o);
  for (const auto& r : requests) {
    CHECK(tokens_of(r.prompt) == r.prompt_len);
    CHECK(r.prompt_len >= 17 + 32);
  }
  // Each prompt draws from a stream of its own: more prompts leave the first ones as they were.
  o.num_prompts = 40;
  auto more = build(o);
  for (std::size_t i = 0; i < requests.size(); ++i)
    CHECK(more[i].prompt == requests[i].prompt);
}

TEST_CASE("bad workload options are refused") {
  workload_options o;
  o.range_ratio = 1.0;
  CHECK_THROWS_AS(build(o), std::invalid_argument);
  o = {};
  o.input_len = 0;
  CHECK_THROWS_AS(build(o), std::invalid_argument);
  o = {};
  o.num_prompts = 0;
  CHECK_THROWS_AS(build(o), std::invalid_argument);
}

TEST_CASE("Poisson arrivals have a mean gap of 1/rate and burstiness changes only the spread") {
  for (double burstiness : {1.0, 0.5, 4.0}) {
    CAPTURE(burstiness);
    arrival_schedule schedule({.request_rate = 10.0, .burstiness = burstiness, .seed = 7});
    std::vector<double> gaps(40000);
    for (auto& g : gaps)
      g = schedule.next_gap();
    double mean = mean_of(gaps);
    double var = 0;
    for (double g : gaps)
      var += (g - mean) * (g - mean);
    var /= gaps.size();
    CHECK(mean == doctest::Approx(0.1).epsilon(0.03));
    // A gamma gap's squared coefficient of variation is 1/shape: 1 for Poisson.
    CHECK(var / (mean * mean) == doctest::Approx(1.0 / burstiness).epsilon(0.06));
  }
  arrival_schedule schedule({.request_rate = 4.0, .burstiness = 1.0, .seed = 1});
  auto t = schedule.offsets(5001);
  CHECK(t[0] == 0);
  CHECK(std::is_sorted(t.begin(), t.end()));
  CHECK(t.back() / 5000 == doctest::Approx(0.25).epsilon(0.05));
}

TEST_CASE("an infinite rate sends every request at t=0") {
  arrival_schedule schedule({});
  CHECK(schedule.unlimited());
  for (double t : schedule.offsets(100))
    CHECK(t == 0);
  CHECK_THROWS_AS(arrival_schedule({.request_rate = 0}), std::invalid_argument);
  CHECK_THROWS_AS(arrival_schedule({.request_rate = 1, .burstiness = 0}), std::invalid_argument);
}

TEST_CASE("the priority mix holds its proportions") {
  workload_options o;
  o.num_prompts = 20000;
  o.input_len = 1;
  o.output_len = 1;
  o.priority_mix = parse_priority_mix("0:0.8,1:0.2");
  std::map<int, int> counts;
  for (const auto& r : build(o)) {
    CHECK(r.has_priority);
    ++counts[r.priority];
  }
  REQUIRE(counts.size() == 2);
  CHECK(counts[1] / 20000.0 == doctest::Approx(0.2).epsilon(0.05));
  CHECK(counts[0] / 20000.0 == doctest::Approx(0.8).epsilon(0.02));

  auto three = parse_priority_mix("-1:1,5:2,7:1");
  REQUIRE(three.size() == 3);
  CHECK(three[0].priority == -1);
  CHECK(three[1].weight == 2);
  CHECK(parse_priority_mix("").empty());
  CHECK_THROWS_AS(parse_priority_mix("0"), std::invalid_argument);
  CHECK_THROWS_AS(parse_priority_mix("a:1"), std::invalid_argument);
  CHECK_THROWS_AS(parse_priority_mix("0:x"), std::invalid_argument);
  CHECK_THROWS_AS(parse_priority_mix("0:-1"), std::invalid_argument);
  CHECK_THROWS_AS(parse_priority_mix("0:0,1:0"), std::invalid_argument);
  o.priority_mix.clear();
  CHECK_FALSE(build(o)[0].has_priority);
}

TEST_CASE("requests ask for exactly their output length with EOS ignored, on both transports") {
  bench_request r{
      .index = 5, .prompt = "the big dog", .prompt_len = 3, .max_tokens = 16, .priority = 1, .has_priority = true};
  auto ws = boost::json::parse(ws_generate_frame(r, {})).as_object();
  CHECK(ws.at("type").as_string() == "generate");
  CHECK(ws.at("id").to_number<int>() == 5);
  CHECK(ws.at("prompt").as_string() == "the big dog");
  CHECK(ws.at("max_tokens").to_number<int>() == 16);
  CHECK(ws.at("ignore_eos").as_bool());
  CHECK(ws.at("temperature").to_number<double>() == 0);
  CHECK(ws.at("priority").to_number<int>() == 1);
  CHECK_FALSE(ws.contains("seed")); // greedy needs none

  auto sse = boost::json::parse(completions_body(r, {.temperature = 0.7, .seed = 100})).as_object();
  CHECK(sse.at("stream").as_bool());
  CHECK(sse.at("stream_options").at("include_usage").as_bool());
  CHECK(sse.at("ignore_eos").as_bool());
  CHECK(sse.at("max_tokens").to_number<int>() == 16);
  CHECK(sse.at("temperature").to_number<double>() == doctest::Approx(0.7));
  CHECK(sse.at("seed").to_number<int>() == 105);
  CHECK_FALSE(sse.contains("type"));
}

TEST_CASE("URLs name the transport and its default path") {
  auto ws = parse_url("ws://127.0.0.1:9000/v1/stream");
  CHECK(ws.kind == transport_kind::ws);
  CHECK(ws.host == "127.0.0.1");
  CHECK(ws.port == "9000");
  CHECK(ws.path == "/v1/stream");
  auto http = parse_url("http://localhost:8080");
  CHECK(http.kind == transport_kind::sse);
  CHECK(http.path == "/v1/completions");
  CHECK(parse_url("http://h:1/", transport_kind::ws).path == "/v1/stream");
  CHECK(parse_url("ws://h:1", transport_kind::sse).kind == transport_kind::sse);
  CHECK(parse_url("ws://h").port == "80");
  CHECK_THROWS_AS(parse_url("ws://h:1/v1/stream", transport_kind::sse), std::invalid_argument);
  CHECK_THROWS_AS(parse_url("https://h:1"), std::invalid_argument);
  CHECK_THROWS_AS(parse_url("127.0.0.1:8080"), std::invalid_argument);
}
