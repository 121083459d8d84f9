// troupe-bench's metrics match vLLM's definitions on hand-made records with known
// answers: numpy percentiles, TTFT/ITL/TPOT/E2E, throughput, goodput, failures left
// out, single-token requests left out of TPOT; and records are filled right from the
// server's WebSocket frames and SSE events.
#include <doctest/doctest.h>

#include <stdexcept>
#include <vector>

#include "apps/troupe-bench/load/serving_metrics.hpp"
#include "apps/troupe-bench/load/stream_events.hpp"

using namespace troupe::bench;

namespace {

request_record record(double send, std::vector<double> chunks, double end, int prompt_tokens, int output_tokens) {
  request_record r;
  r.send_s = send;
  r.chunk_s = std::move(chunks);
  r.end_s = end;
  r.prompt_tokens = prompt_tokens;
  r.output_tokens = output_tokens;
  r.usage_reported = true;
  r.success = true;
  return r;
}

request_record failure(double send, double end) {
  request_record r;
  r.send_s = send;
  r.end_s = end;
  r.error = "server_error: boom";
  return r;
}

} // namespace

TEST_CASE("percentile interpolates between the closest ranks as numpy does") {
  std::vector<double> v{4, 1, 3, 2}; // unsorted on purpose
  CHECK(percentile(v, 0) == doctest::Approx(1));
  CHECK(percentile(v, 50) == doctest::Approx(2.5));
  CHECK(percentile(v, 90) == doctest::Approx(3.7));
  CHECK(percentile(v, 99) == doctest::Approx(3.97));
  CHECK(percentile(v, 100) == doctest::Approx(4));
  std::vector<double> one{7};
  CHECK(percentile(one, 99) == doctest::Approx(7));
  CHECK(percentile(std::vector<double>{}, 50) == 0);
}

TEST_CASE("summaries are in milliseconds with the population standard deviation") {
  std::vector<double> s{0.010, 0.020, 0.030, 0.040};
  auto stats = summarize_seconds(s);
  CHECK(stats.count == 4);
  CHECK(stats.mean_ms == doctest::Approx(25));
  CHECK(stats.median_ms == doctest::Approx(25));
  CHECK(stats.std_ms == doctest::Approx(11.180339887)); // sqrt(125)
  CHECK(stats.p90_ms == doctest::Approx(37));
  CHECK(stats.p99_ms == doctest::Approx(39.7));
  auto none = summarize_seconds({});
  CHECK(none.count == 0);
  CHECK(none.mean_ms == 0);
}

TEST_CASE("TTFT, ITL, TPOT and E2E of one request") {
  auto r = record(1.0, {1.1, 1.15, 1.25, 1.3}, 1.31, 10, 4);
  CHECK(ttft_s(r) == doctest::Approx(0.1));
  CHECK(e2e_s(r) == doctest::Approx(0.31));
  REQUIRE(tpot_s(r).has_value());
  CHECK(*tpot_s(r) == doctest::Approx((0.31 - 0.1) / 3));
  auto gaps = itls_s(r);
  REQUIRE(gaps.size() == 3);
  CHECK(gaps[0] == doctest::Approx(0.05));
  CHECK(gaps[1] == doctest::Approx(0.10));
  CHECK(gaps[2] == doctest::Approx(0.05));
  // No chunk at all: the first token is taken to arrive with the end.
  auto silent = record(1.0, {}, 1.5, 10, 0);
  CHECK(ttft_s(silent) == doctest::Approx(0.5));
}

TEST_CASE("metrics over several requests: latencies, tokens and throughput") {
  std::vector<request_record> rs{
      record(0.0, {0.1, 0.2, 0.3}, 0.3, 10, 3),       // TTFT 100, TPOT 100, ITL 100,100, E2E 300
      record(0.5, {0.8, 0.85, 0.9, 0.95}, 1.0, 20, 5) // TTFT 300, TPOT 50, ITL 50 x3, E2E 500
  };
  auto m = compute_serving_metrics(rs, 2.0);
  CHECK(m.completed == 2);
  CHECK(m.failed == 0);
  CHECK(m.total_input_tokens == 30);
  CHECK(m.total_output_tokens == 8);
  CHECK(m.request_throughput == doctest::Approx(1.0));
  CHECK(m.output_throughput == doctest::Approx(4.0));
  CHECK(m.total_token_throughput == doctest::Approx(19.0));
  CHECK_FALSE(m.request_goodput.has_value());
  CHECK(m.ttft.mean_ms == doctest::Approx(200));
  CHECK(m.ttft.median_ms == doctest::Approx(200));
  CHECK(m.ttft.std_ms == doctest::Approx(100));
  CHECK(m.tpot.count == 2);
  CHECK(m.tpot.mean_ms == doctest::Approx(75));
  CHECK(m.e2e.mean_ms == doctest::Approx(400));
  CHECK(m.e2e.p99_ms == doctest::Approx(498));
  // ITL pools every gap of every request: 100, 100, 50, 50, 50.
  CHECK(m.itl.count == 5);
  CHECK(m.itl.mean_ms == doctest::Approx(70));
  CHECK(m.itl.median_ms == doctest::Approx(50));
}

TEST_CASE("failed requests are counted but take no part in latencies or tokens") {
  std::vector<request_record> rs{record(0.0, {0.1, 0.2}, 0.2, 10, 2), failure(0.0, 0.001), failure(0.1, 5.0)};
  auto m = compute_serving_metrics(rs, 1.0);
  CHECK(m.completed == 1);
  CHECK(m.failed == 2);
  CHECK(m.total_output_tokens == 2);
  CHECK(m.total_input_tokens == 10);
  CHECK(m.ttft.count == 1);
  CHECK(m.ttft.mean_ms == doctest::Approx(100));
  CHECK(m.e2e.count == 1);
  CHECK(m.request_throughput == doctest::Approx(1.0));
}

TEST_CASE("TTFT is summarized per priority when requests carry more than one") {
  std::vector<request_record> rs{record(0.0, {0.1}, 0.1, 5, 1), record(0.0, {0.3}, 0.3, 5, 1),
                                 record(0.0, {0.02}, 0.02, 5, 1), failure(0.0, 0.5)};
  rs[2].priority = -1;
  rs[3].priority = -1; // failed: not in any latency
  auto m = compute_serving_metrics(rs, 1.0);
  REQUIRE(m.ttft_by_priority.size() == 2);
  CHECK(m.ttft_by_priority.at(0).count == 2);
  CHECK(m.ttft_by_priority.at(0).mean_ms == doctest::Approx(200));
  CHECK(m.ttft_by_priority.at(-1).count == 1);
  CHECK(m.ttft_by_priority.at(-1).p99_ms == doctest::Approx(20));
  // One priority for all: nothing to split.
  rs[2].priority = 0;
  CHECK(compute_serving_metrics(rs, 1.0).ttft_by_priority.empty());
}

TEST_CASE("single-token requests have no TPOT but count for TTFT and E2E") {
  std::vector<request_record> rs{record(0.0, {0.2}, 0.2, 5, 1), record(0.0, {0.1, 0.2, 0.3}, 0.3, 5, 3)};
  auto m = compute_serving_metrics(rs, 1.0);
  CHECK(m.ttft.count == 2);
  CHECK(m.e2e.count == 2);
  CHECK(m.tpot.count == 1);
  CHECK(m.tpot.mean_ms == doctest::Approx(100));
  CHECK_FALSE(tpot_s(rs[0]).has_value());
}

TEST_CASE("goodput counts the requests that meet every SLO, per second") {
  std::vector<request_record> rs{
      record(0.0, {0.1, 0.2, 0.3}, 0.3, 5, 3),    // TTFT 100, TPOT 100, E2E 300
      record(0.0, {0.3, 0.32, 0.34}, 0.34, 5, 3), // TTFT 300, TPOT 20, E2E 340
      record(0.0, {0.05, 0.1}, 0.1, 5, 2),        // TTFT 50, TPOT 50, E2E 100
      record(0.0, {0.05}, 0.05, 5, 1),            // TTFT 50, TPOT 0 (one token), E2E 50
      failure(0.0, 0.01),                         // never good
  };
  auto both = parse_goodput("ttft:200,tpot:60");
  auto m = compute_serving_metrics(rs, 2.0, both);
  CHECK(m.good_requests == 2); // the third and the fourth
  REQUIRE(m.request_goodput.has_value());
  CHECK(*m.request_goodput == doctest::Approx(1.0));

  m = compute_serving_metrics(rs, 2.0, parse_goodput("ttft:200"));
  CHECK(m.good_requests == 3);
  m = compute_serving_metrics(rs, 2.0, parse_goodput("e2e:320"));
  CHECK(m.good_requests == 3);
  m = compute_serving_metrics(rs, 2.0, parse_goodput("e2el:320,tpot:150")); // vLLM's name for e2e
  CHECK(m.good_requests == 3);

  // A request exactly at the limit meets it (times exact in binary).
  std::vector<request_record> edge{record(0.0, {0.25, 0.5}, 0.5, 5, 2)};
  CHECK(compute_serving_metrics(edge, 1.0, parse_goodput("ttft:250,tpot:250,e2e:500")).good_requests == 1);
  CHECK(compute_serving_metrics(edge, 1.0, parse_goodput("ttft:249")).good_requests == 0);
}

TEST_CASE("parse_goodput reads ttft, tpot and e2e in milliseconds and refuses the rest") {
  auto slo = parse_goodput("ttft:200,tpot:50,e2e:1000");
  CHECK(*slo.ttft_ms == 200);
  CHECK(*slo.tpot_ms == 50);
  CHECK(*slo.e2e_ms == 1000);
  CHECK_FALSE(parse_goodput("").any());
  CHECK_THROWS_AS(parse_goodput("itl:5"), std::invalid_argument);
  CHECK_THROWS_AS(parse_goodput("ttft"), std::invalid_argument);
  CHECK_THROWS_AS(parse_goodput("ttft:abc"), std::invalid_argument);
  CHECK_THROWS_AS(parse_goodput("ttft:-1"), std::invalid_argument);
  CHECK_THROWS_AS(parse_goodput("ttft:1,ttft:2"), std::invalid_argument);
}

TEST_CASE("input tokens fall back to the workload's count when the server reports none") {
  auto r = record(0.0, {0.1, 0.2}, 0.2, 0, 2);
  r.usage_reported = false;
  r.expected_prompt_tokens = 12;
  std::vector<request_record> rs{r};
  CHECK(compute_serving_metrics(rs, 1.0).total_input_tokens == 12);
}

TEST_CASE("WebSocket frames fill a record: deltas time chunks and done ends it with usage") {
  request_record r;
  r.send_s = 0;
  CHECK_FALSE(apply_event(read_ws_frame(R"({"type":"delta","id":3,"text":"Once","token_ids":[9]})"), 0.1, r));
  // A delta whose text is held back (a partial character) still brings a token.
  CHECK_FALSE(apply_event(read_ws_frame(R"({"type":"delta","id":3,"text":"","token_ids":[200,201]})"), 0.2, r));
  CHECK(read_ws_frame(R"({"type":"delta","id":3,"text":""})").what == stream_event::kind::ignored);
  auto done = read_ws_frame(
      R"({"type":"done","id":3,"finish_reason":"length","usage":{"prompt_tokens":7,"completion_tokens":3,)"
      R"("total_tokens":10},"timings":{"ttft_ms":1.0}})");
  CHECK(*done.id == 3);
  CHECK(apply_event(done, 0.25, r));
  CHECK(r.success);
  CHECK(r.chunk_s == std::vector<double>{0.1, 0.2});
  CHECK(r.streamed_tokens == 3);
  CHECK(r.prompt_tokens == 7);
  CHECK(r.output_tokens == 3);
  CHECK(r.end_s == 0.25);

  request_record failed;
  auto err = read_ws_frame(R"({"type":"error","id":4,"code":"prompt_too_long","message":"too long"})");
  CHECK(*err.id == 4);
  CHECK(apply_event(err, 0.3, failed));
  CHECK_FALSE(failed.success);
  CHECK(failed.error == "prompt_too_long: too long");
  CHECK(read_ws_frame("not json").what == stream_event::kind::error);
}

TEST_CASE("SSE events fill a record: empty finish chunks are not chunks, usage and DONE end it") {
  sse_splitter splitter;
  std::vector<std::string> payloads;
  std::string stream =
      "data: {\"choices\":[{\"index\":0,\"text\":\" Once\",\"finish_reason\":null}],\"usage\":null}\n\n"
      "data: {\"choices\":[{\"index\":0,\"text\":\" upon\",\"finish_reason\":null}],\"usage\":null}\r\n\r\n"
      "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}],\"usage\":null}\n\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\n"
      "data: [DONE]\n\n";
  // Byte by byte: the splitter must not care where reads end.
  for (char c : stream)
    splitter.feed(std::string_view(&c, 1), [&](std::string_view d) { payloads.emplace_back(d); });
  REQUIRE(payloads.size() == 5);
  CHECK(payloads[4] == "[DONE]");

  request_record r;
  double t = 0;
  bool ended = false;
  for (const auto& p : payloads)
    ended = apply_event(read_sse_data(p), t += 0.1, r);
  CHECK(ended);
  CHECK(r.success);
  CHECK(r.chunk_s.size() == 2);
  CHECK(r.output_tokens == 2);
  CHECK(r.prompt_tokens == 5);
  CHECK(r.end_s == doctest::Approx(0.5));

  request_record failed;
  CHECK(apply_event(read_sse_data(R"({"error":{"message":"engine failed","type":"server_error"}})"), 0.1, failed));
  CHECK_FALSE(failed.success);
  CHECK(failed.error == "engine failed");
}

TEST_CASE("without usage the output tokens are the tokens streamed") {
  request_record r;
  apply_event(read_sse_data(R"({"choices":[{"text":"a"}]})"), 0.1, r);
  apply_event(read_sse_data(R"({"choices":[{"text":"b"}]})"), 0.2, r);
  CHECK(apply_event(read_sse_data("[DONE]"), 0.3, r));
  CHECK(r.success);
  CHECK_FALSE(r.usage_reported);
  CHECK(r.output_tokens == 2);
}
