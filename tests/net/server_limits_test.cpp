// The server's bounds on what a client controls, each hit on a live server:
// oversized headers get 431, a request that trickles in (slowloris) gets 408
// and is cut off, an idle keep-alive connection and a silent WebSocket are
// closed, too many requests in flight on one WebSocket or under one API key are
// refused (error frame, 429), and the request-body limits of [server] apply.
// Meanwhile a well-behaved client streaming a generation is not disturbed.
#include <doctest/doctest.h>

#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <thread>

#include "tests/support/served_engine.hpp"

using namespace troupe;
using namespace troupe::testing;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

const std::string long_generate =
    R"({"type":"generate","id":"bystander","prompt":"Once upon a time","max_tokens":300,"ignore_eos":true})";

// A WebSocket client with a long generation under way (its first delta has
// arrived); finish() reads it to the end and checks it ended normally.
struct bystander {
  ws_client c;
  explicit bystander(std::uint16_t port, const std::string& key = {}) : c(port, key) {
    c.send(long_generate);
    auto first = c.read();
    REQUIRE(first.at("type") == "delta");
  }
  void finish() {
    auto done = ws_read_to_end(c.ws);
    CHECK(done.at("type") == "done");
    CHECK(done.at("finish_reason") == "length");
    CHECK(done.at("usage").at("completion_tokens").as_int64() == 300);
  }
};

double seconds_since(steady::time_point t) {
  return std::chrono::duration<double>(steady::now() - t).count();
}

// Reads until the server closes the connection; returns what came (with a time limit: "" and false past it).
std::pair<std::string, bool> read_until_closed(tcp::socket& socket, std::chrono::seconds limit) {
  std::string got;
  socket.non_blocking(true);
  const auto start = steady::now();
  char buf[4096];
  while (steady::now() - start < limit) {
    beast::error_code ec;
    auto n = socket.read_some(asio::buffer(buf), ec);
    if (ec == asio::error::would_block) {
      std::this_thread::sleep_for(20ms);
      continue;
    }
    got.append(buf, n);
    if (ec)
      return {got, true};
  }
  return {got, false};
}

} // namespace

TEST_CASE("headers beyond max-header-kib get 431 while a streaming client is unaffected") {
  net::server_config cfg;
  cfg.max_header_bytes = 1024;
  served_engine s(cfg);
  bystander b(s.port);
  auto big = http_call(s.port, http::verb::get, "/health", {}, {{http::field::user_agent, std::string(2000, 'x')}});
  CHECK(big.status == 431);
  CHECK(json_of(big.body).at("error").at("code") == "headers_too_large");
  auto small = http_call(s.port, http::verb::get, "/health", {}, {{http::field::user_agent, std::string(500, 'x')}});
  CHECK(small.status == 200);
  b.finish();
}

TEST_CASE("slowloris: a request trickling in past request-timeout gets 408 and is cut off, others are served") {
  net::server_config cfg;
  cfg.request_timeout = 1500ms;
  served_engine s(cfg);
  bystander b(s.port);
  // Well-behaved clients, served while the slow one trickles.
  auto others = std::async(std::launch::async, [&] {
    int ok = 0;
    for (int i = 0; i < 3; ++i) {
      std::this_thread::sleep_for(200ms);
      ok += http_call(s.port, http::verb::post, "/v1/completions", R"({"prompt":"One day","max_tokens":4})").status ==
            200;
    }
    return ok;
  });

  asio::io_context ioc;
  tcp::socket slow(ioc);
  slow.connect(local_endpoint(s.port));
  slow.non_blocking(true);
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + std::string(200, 'z');
  const auto start = steady::now();
  std::string answer;
  bool closed = false;
  // One byte every 100 ms, reading whatever the server says in between, until it closes (10 s at most).
  for (std::size_t i = 0; !closed && seconds_since(start) < 10; ++i) {
    beast::error_code ec;
    if (i < head.size())
      asio::write(slow, asio::buffer(&head[i], 1), ec);
    char buf[1024];
    auto n = slow.read_some(asio::buffer(buf), ec);
    answer.append(buf, n);
    closed = ec && ec != asio::error::would_block;
    std::this_thread::sleep_for(100ms);
  }
  const double elapsed = seconds_since(start);
  CHECK(closed);
  CHECK(answer.starts_with("HTTP/1.1 408 Request Timeout\r\n"));
  CHECK(answer.find("request_timeout") != std::string::npos);
  CHECK(elapsed >= 1.4);
  CHECK(elapsed < 6.0); // 1.5 s to the 408, then at most 2 s of draining
  CHECK(others.get() == 3);
  b.finish();
}

TEST_CASE("idle-timeout closes a keep-alive connection that sends no next request, also after a generation") {
  net::server_config cfg;
  cfg.idle_timeout = 1000ms;
  served_engine s(cfg);
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.connect(local_endpoint(s.port));
  beast::flat_buffer buffer;
  // A generation first: while it runs the server watches the connection for a disconnect.
  auto r = exchange(stream, buffer,
                    make_request(http::verb::post, "/v1/completions", R"({"prompt":"One day","max_tokens":4})"));
  REQUIRE(r.status == 200);
  // Within the timeout the connection still serves.
  std::this_thread::sleep_for(300ms);
  CHECK(exchange(stream, buffer, make_request(http::verb::get, "/health")).status == 200);
  const auto start = steady::now();
  auto [rest, closed] = read_until_closed(stream.socket(), 10s);
  CHECK(closed);
  CHECK(rest.empty()); // closed without a word: no request was under way
  CHECK(seconds_since(start) >= 0.8);
  CHECK(seconds_since(start) < 4.0);
  CHECK(http_call(s.port, http::verb::get, "/health").status == 200);
}

TEST_CASE("idle-timeout drops a WebSocket that answers no pings, a live one stays") {
  net::server_config cfg;
  cfg.idle_timeout = 1000ms;
  served_engine s(cfg);
  // Live: a pending read answers the server's pings (Beast does so inside any read).
  ws_client live(s.port);
  beast::flat_buffer live_buffer;
  bool live_read = false;
  beast::error_code live_ec;
  live.ws.async_read(live_buffer, [&](beast::error_code ec, std::size_t) {
    live_read = true;
    live_ec = ec;
  });
  // Silent: nothing is read from it, so the pings go unanswered.
  ws_client silent(s.port);
  live.ioc.run_for(2500ms);
  CHECK_FALSE(live_read); // nothing came but pings, and the connection is open
  // The silent one was closed: reading now finds the end (after any pings that came before it).
  bool silent_ended = false;
  beast::flat_buffer silent_buffer;
  std::function<void(beast::error_code, std::size_t)> on_silent = [&](beast::error_code ec, std::size_t) {
    if (ec) {
      silent_ended = true;
      return;
    }
    silent_buffer.clear();
    silent.ws.async_read(silent_buffer, on_silent);
  };
  silent.ws.async_read(silent_buffer, on_silent);
  silent.ioc.run_for(5s);
  CHECK(silent_ended);
  // The live one still serves.
  const std::string generate = R"({"type":"generate","id":1,"prompt":"One day","max_tokens":3})";
  live.ws.text(true);
  live.ws.async_write(asio::buffer(generate), [](beast::error_code, std::size_t) {});
  for (auto deadline = steady::now() + 10s; !live_read && steady::now() < deadline;) {
    if (live.ioc.stopped())
      live.ioc.restart();
    live.ioc.run_one_for(100ms);
  }
  REQUIRE(live_read);
  CHECK_FALSE(live_ec);
  CHECK(json_of(beast::buffers_to_string(live_buffer.data())).at("type") == "delta");
}

TEST_CASE("max-inflight-per-connection: the request beyond gets an error frame and the connection keeps serving") {
  net::server_config cfg;
  cfg.max_in_flight_per_connection = 2;
  served_engine s(cfg);
  bystander b(s.port);
  ws_client c(s.port);
  for (int id = 1; id <= 3; ++id)
    c.send(R"({"type":"generate","id":)" + std::to_string(id) +
           R"(,"prompt":"Once upon a time","max_tokens":40,"ignore_eos":true})");
  std::map<std::int64_t, std::string> ends;
  while (ends.size() < 3) {
    auto f = c.read();
    if (f.at("type") != "delta")
      ends[f.at("id").as_int64()] = f.at("type") == "error" ? std::string(f.at("code").as_string()) : "done";
  }
  CHECK(ends[1] == "done");
  CHECK(ends[2] == "done");
  CHECK(ends[3] == "too_many_requests");
  c.send(R"({"type":"generate","id":4,"prompt":"One day","max_tokens":3})");
  CHECK(ws_read_to_end(c.ws).at("type") == "done");
  b.finish();
}

TEST_CASE("max-inflight-per-key: a second concurrent request with the same key gets 429, another key is served") {
  net::server_config cfg;
  cfg.keys = net::api_keys({"sk-a", "sk-b"});
  cfg.max_in_flight_per_key = 1;
  served_engine s(cfg);
  bystander first(s.port, "sk-a"); // sk-a's one request, streaming
  const std::string stream_body = R"({"prompt":"Once upon a time","max_tokens":8,"stream":true})";
  auto same_key = http_call(s.port, http::verb::post, "/v1/completions", stream_body,
                            {{http::field::authorization, "Bearer sk-a"}});
  CHECK(same_key.status == 429);
  CHECK(same_key.retry_after == "1");
  CHECK(json_of(same_key.body).at("error").at("code") == "rate_limit_exceeded");
  // Over WebSocket the refusal is an error frame, and the connection stays usable.
  ws_client again(s.port, "sk-a");
  again.send(R"({"type":"generate","id":"x","prompt":"One day","max_tokens":3})");
  auto refused = again.read();
  CHECK(refused.at("type") == "error");
  CHECK(refused.at("code") == "too_many_requests");
  auto other_key = http_call(s.port, http::verb::post, "/v1/completions", stream_body,
                             {{http::field::authorization, "Bearer sk-b"}});
  CHECK(other_key.status == 200);
  CHECK_FALSE(sse_text(other_key.body, false).empty());
  first.finish(); // sk-a's place comes back when its request ends
  again.send(R"({"type":"generate","id":"y","prompt":"One day","max_tokens":3})");
  CHECK(ws_read_to_end(again.ws).at("type") == "done");
  CHECK(
      http_call(s.port, http::verb::post, "/v1/completions", stream_body, {{http::field::authorization, "Bearer sk-a"}})
          .status == 200);
}

TEST_CASE("the request limits of server_config apply: stop strings, their length, JSON depth, logprobs") {
  net::server_config cfg;
  cfg.limits.max_stop_strings = 1;
  cfg.limits.max_stop_length = 4;
  cfg.limits.max_json_depth = 3;
  cfg.limits.max_logprobs = 2;
  served_engine s(cfg);
  auto param_of = [&](const std::string& body) {
    auto r = http_call(s.port, http::verb::post, "/v1/completions", body);
    CHECK(r.status == 400);
    auto error = json_of(r.body).at("error").as_object();
    const auto& p = error.at("param");
    return p.is_null() ? std::string() : std::string(p.as_string());
  };
  CHECK(param_of(R"({"prompt":"a","stop":["x","y"]})") == "stop");
  CHECK(param_of(R"({"prompt":"a","stop":"longer"})") == "stop");
  CHECK(param_of(R"({"prompt":"a","logprobs":3})") == "logprobs");
  CHECK(http_call(s.port, http::verb::post, "/v1/completions", R"({"prompt":"a","x":[[[[1]]]]})").status == 400);
  auto ok = http_call(s.port, http::verb::post, "/v1/completions",
                      R"({"prompt":"a","stop":["x"],"logprobs":2,"max_tokens":2})");
  CHECK(ok.status == 200);
}
