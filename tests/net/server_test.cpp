// troupe's server on 127.0.0.1 with an ephemeral port, driven by Beast
// clients: WebSocket streaming with interleaved requests and cancel, OpenAI
// completions and chat (JSON and SSE) agreeing with each other and with the
// golden greedy output, and bad input answered with the exact status or frame
// while the server keeps serving.
#include <doctest/doctest.h>

#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "net/metrics.hpp"
#include "tests/support/served_engine.hpp"

using namespace troupe;
using namespace troupe::testing;

TEST_CASE("WebSocket: two interleaved requests stream their golden text and end with done frames") {
  served_engine s;
  ws_client c(s.port);
  c.send(
      R"({"type":"generate","id":"a","prompt":"Once upon a time","max_tokens":64,"temperature":0,"ignore_eos":true})");
  c.send(R"({"type":"generate","id":7,"prompt":"The little dog","max_tokens":10,"temperature":0})");
  std::map<std::string, std::string> text;
  std::map<std::string, boost::json::object> done;
  while (done.size() < 2) {
    auto f = c.read();
    auto id = boost::json::serialize(f.at("id"));
    auto type = std::string(f.at("type").as_string().c_str());
    REQUIRE(type != "error");
    if (type == "delta")
      text[id] += f.at("text").as_string().c_str();
    else if (type == "done")
      done[id] = f;
  }
  CHECK(text["\"a\""] == golden_first_text);
  CHECK(done["\"a\""].at("finish_reason").as_string() == "length");
  CHECK(done["\"a\""].at("usage").at("completion_tokens").as_int64() == 64);
  CHECK(done.count("7") == 1);
  CHECK(done["7"].at("timings").at("ttft_ms").as_double() > 0);
}

TEST_CASE("HTTP: completions JSON and SSE and WebSocket agree on the golden greedy text") {
  served_engine s;
  const std::string request = R"({"prompt":"Once upon a time","max_tokens":64,"temperature":0,"ignore_eos":true)";
  auto plain = http_call(s.port, http::verb::post, "/v1/completions", request + "}");
  REQUIRE(plain.status == 200);
  auto body = json_of(plain.body);
  CHECK(body.at("object").as_string() == "text_completion");
  auto& choice = body.at("choices").as_array()[0].as_object();
  CHECK(choice.at("text").as_string() == golden_first_text);
  CHECK(choice.at("finish_reason").as_string() == "length");
  CHECK(body.at("usage").at("completion_tokens").as_int64() == 64);
  CHECK(body.at("usage").at("prompt_tokens").as_int64() == 5);

  auto streamed = http_call(s.port, http::verb::post, "/v1/completions", request + R"(,"stream":true})");
  REQUIRE(streamed.status == 200);
  std::string finish;
  CHECK(sse_text(streamed.body, false, &finish) == golden_first_text);
  CHECK(finish == "length");
  CHECK(streamed.body.find("data: [DONE]\n\n") != std::string::npos);
}

TEST_CASE("HTTP: chat completions, JSON and SSE, give the same text") {
  served_engine s;
  const std::string request =
      R"({"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":24,"temperature":0)";
  auto plain = http_call(s.port, http::verb::post, "/v1/chat/completions", request + "}");
  REQUIRE(plain.status == 200);
  auto body = json_of(plain.body);
  CHECK(body.at("object").as_string() == "chat.completion");
  auto& message = body.at("choices").as_array()[0].at("message").as_object();
  CHECK(message.at("role").as_string() == "assistant");
  std::string content = message.at("content").as_string().c_str();
  CHECK_FALSE(content.empty());
  auto streamed = http_call(s.port, http::verb::post, "/v1/chat/completions", request + R"(,"stream":true})");
  REQUIRE(streamed.status == 200);
  CHECK(sse_text(streamed.body, true) == content);
}

TEST_CASE("HTTP: health, models, tokenize, detokenize, metrics") {
  served_engine s;
  auto health = http_call(s.port, http::verb::get, "/health");
  CHECK(health.status == 200);
  auto models = json_of(http_call(s.port, http::verb::get, "/v1/models").body);
  CHECK(models.at("data").as_array()[0].at("id").as_string() == "stories260k");
  CHECK(models.at("data").as_array()[0].at("max_model_len").as_int64() == 512);
  auto tok = json_of(http_call(s.port, http::verb::post, "/tokenize", R"({"prompt":"Once upon a time"})").body);
  CHECK(boost::json::serialize(tok.at("tokens")) == "[1,403,407,261,378]");
  // A NUL inside the prompt does not end it (the text after it is tokenized too).
  auto with_nul =
      json_of(http_call(s.port, http::verb::post, "/tokenize", R"({"prompt":"Once\u0000 upon a time"})").body);
  auto before_nul = json_of(http_call(s.port, http::verb::post, "/tokenize", R"({"prompt":"Once"})").body);
  CHECK(with_nul.at("count").as_int64() > before_nul.at("count").as_int64() + 2);
  auto detok = json_of(http_call(s.port, http::verb::post, "/detokenize", R"({"tokens":[1,403,407,261,378]})").body);
  CHECK(detok.at("prompt").as_string() == "Once upon a time");
  auto bad = http_call(s.port, http::verb::post, "/detokenize", R"({"tokens":[1,99999]})");
  CHECK(bad.status == 400);
  // Metrics move after a known request.
  http_call(s.port, http::verb::post, "/v1/completions", R"({"prompt":"One day","max_tokens":3,"temperature":0})");
  auto metrics = http_call(s.port, http::verb::get, "/metrics").body;
  CHECK(metrics.find("troupe:request_success_total{model_name=\"stories260k\",finished_reason=\"length\"} 1") !=
        std::string::npos);
  CHECK(metrics.find("troupe:generation_tokens_total{model_name=\"stories260k\"} 3") != std::string::npos);
  CHECK(metrics.find("troupe:time_to_first_token_seconds_count 1") != std::string::npos);
  CHECK(metrics.find("troupe:num_requests_running{model_name=\"stories260k\"} 0") != std::string::npos);
  // The finished request's blocks go back with the engine's next prepare, just after its last token:
  // the usage gauges settle to 0 within a moment (slower under sanitizers), not necessarily at once.
  const std::string device_idle = "troupe:kv_cache_usage_perc{model_name=\"stories260k\"} 0\n";
  const std::string host_idle = "troupe:cpu_cache_usage_perc{model_name=\"stories260k\"} 0\n";
  for (int i = 0;
       i < 100 && (metrics.find(device_idle) == std::string::npos || metrics.find(host_idle) == std::string::npos);
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    metrics = http_call(s.port, http::verb::get, "/metrics").body;
  }
  CHECK(metrics.find(device_idle) != std::string::npos);
  CHECK(metrics.find(host_idle) != std::string::npos);
  // Nothing was preempted: no swap traffic in either direction.
  for (const char* direction : {"out", "in", "in_reused"})
    CHECK(metrics.find(std::string("troupe:swap_bytes_total{model_name=\"stories260k\",direction=\"") + direction +
                       "\"} 0") != std::string::npos);
}

TEST_CASE("metrics: device and host (swap) KV usage come from the engine's block counts") {
  net::server_metrics m;
  engine_stats s;
  s.device_blocks_free = 12;
  s.device_blocks_total = 48;
  s.host_blocks_free = 99;
  s.host_blocks_total = 100; // one block held by a swapped-out sequence: a leak if the engine is idle
  auto page = m.render(s, "m");
  CHECK(page.find("troupe:kv_cache_usage_perc{model_name=\"m\"} 0.75\n") != std::string::npos);
  CHECK(page.find("troupe:cpu_cache_usage_perc{model_name=\"m\"} 0.01\n") != std::string::npos);
  s.host_blocks_total = 0; // no host tier (swap-space 0): nothing in use
  s.host_blocks_free = 0;
  CHECK(m.render(s, "m").find("troupe:cpu_cache_usage_perc{model_name=\"m\"} 0\n") != std::string::npos);
  s.window_released_blocks = 37; // a sliding-window model gave blocks back
  CHECK(m.render(s, "m").find("troupe:kv_window_released_blocks_total{model_name=\"m\"} 37\n") != std::string::npos);
}

TEST_CASE("HTTP: bad requests get their exact status and the server keeps serving") {
  served_engine s;
  auto status_of = [&](const std::string& target, const std::string& body) {
    return http_call(s.port, http::verb::post, target, body).status;
  };
  CHECK(status_of("/v1/completions", "{not json") == 400);
  CHECK(status_of("/v1/completions", R"({"prompt":5})") == 400);
  CHECK(status_of("/v1/completions", R"({"max_tokens":5})") == 400);
  CHECK(status_of("/v1/completions", R"({"prompt":"a","max_tokens":-1})") == 400);
  CHECK(status_of("/v1/completions", R"({"prompt":"a","max_tokens":100000000})") == 400);
  CHECK(status_of("/v1/completions", R"({"prompt":"a","temperature":9})") == 400);
  CHECK(status_of("/v1/completions", R"({"prompt":"a","top_p":0})") == 400);
  CHECK(status_of("/v1/chat/completions", R"({"messages":[{"role":"robot","content":"x"}]})") == 400);
  auto too_long = http_call(s.port, http::verb::post, "/v1/completions",
                            R"({"prompt":")" + std::string(3000, 'x') + R"(","max_tokens":4})");
  CHECK(too_long.status == 400);
  CHECK(too_long.body.find("context_length_exceeded") != std::string::npos);
  auto too_long_stream = http_call(s.port, http::verb::post, "/v1/completions",
                                   R"({"prompt":")" + std::string(3000, 'x') + R"(","max_tokens":4,"stream":true})");
  CHECK(too_long_stream.status == 400); // refused before any chunk: a plain error, not a stream
  CHECK(http_call(s.port, http::verb::get, "/v1/completions").status == 405);
  CHECK(http_call(s.port, http::verb::get, "/nowhere").status == 404);
  auto huge = http_call(s.port, http::verb::post, "/v1/completions", std::string(2 << 20, ' '));
  CHECK(huge.status == 413);
  // Still serving.
  auto ok = http_call(s.port, http::verb::post, "/v1/completions", R"({"prompt":"One day","max_tokens":4})");
  CHECK(ok.status == 200);
}

TEST_CASE("WebSocket: bad frames get error frames, cancel works, and the connection keeps serving") {
  served_engine s;
  ws_client c(s.port);
  c.send("{not json");
  auto e1 = c.read();
  CHECK(e1.at("type").as_string() == "error");
  CHECK(e1.at("id").is_null());
  c.send(R"({"type":"dance","id":1})");
  CHECK(c.read().at("type").as_string() == "error");
  c.send(R"({"type":"generate","id":2,"prompt":"x","max_tokens":-3})");
  auto e3 = c.read();
  CHECK(e3.at("type").as_string() == "error");
  CHECK(e3.at("id").as_int64() == 2);
  c.send(R"({"type":"cancel","id":"nobody"})");
  auto e4 = c.read();
  CHECK(e4.at("code").as_string() == "unknown_id");
  c.ws.binary(true);
  c.ws.write(asio::buffer(std::string("\x01\x02", 2)));
  auto e5 = c.read();
  CHECK(e5.at("type").as_string() == "error");
  // A long request cancelled after its first delta ends with done / cancelled.
  c.send(R"({"type":"generate","id":"long","prompt":"Once upon a time","max_tokens":400,"ignore_eos":true})");
  auto first = c.read();
  REQUIRE(first.at("type").as_string() == "delta");
  c.send(R"({"type":"cancel","id":"long"})");
  boost::json::object last;
  do
    last = c.read();
  while (last.at("type").as_string() == "delta");
  CHECK(last.at("type").as_string() == "done");
  CHECK(last.at("finish_reason").as_string() == "cancelled");
  // Still serving on the same connection.
  c.send(R"({"type":"generate","id":"after","prompt":"One day","max_tokens":3,"temperature":0})");
  boost::json::object f;
  do
    f = c.read();
  while (f.at("type").as_string() == "delta");
  CHECK(f.at("type").as_string() == "done");
  auto stats = s.fx.settled_stats();
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
}

TEST_CASE("WebSocket: an oversize message closes the connection with 1009, others are unaffected") {
  net::server_config cfg;
  cfg.max_ws_message_bytes = 1024;
  served_engine s(cfg);
  ws_client other(s.port);
  ws_client c(s.port);
  // Just over the limit: the server reads it all, so the close frame is not lost to a TCP reset.
  c.send(R"({"type":"generate","id":1,"prompt":")" + std::string(1100, 'a') + R"("})");
  beast::flat_buffer buffer;
  beast::error_code ec;
  c.ws.read(buffer, ec);
  CHECK(ec == websocket::error::closed);
  CHECK(c.ws.reason().code == websocket::close_code::too_big);
  other.send(R"({"type":"generate","id":1,"prompt":"One day","max_tokens":2,"temperature":0})");
  boost::json::object f;
  do
    f = other.read();
  while (f.at("type").as_string() == "delta");
  CHECK(f.at("type").as_string() == "done");
}

TEST_CASE("an abrupt disconnect mid-stream aborts the request and frees its blocks") {
  served_engine s;
  {
    ws_client c(s.port);
    c.send(R"({"type":"generate","id":1,"prompt":"Once upon a time","max_tokens":400,"ignore_eos":true})");
    c.read();                  // the first delta: it is running
    c.ws.next_layer().close(); // no close handshake
  }
  auto stats = s.fx.wait_for_stats([](const engine_stats& st) {
    return st.requests_aborted == 1 && st.running == 0 && st.device_blocks_free == st.device_blocks_total;
  });
  CHECK(stats.requests_aborted == 1);
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
  CHECK(stats.decode_tokens < 399);
}

TEST_CASE("too many connections get 503 with Retry-After") {
  net::server_config cfg;
  cfg.max_connections = 2;
  served_engine s(cfg);
  ws_client a(s.port);
  ws_client b(s.port);
  auto refused = http_call(s.port, http::verb::get, "/health");
  CHECK(refused.status == 503);
  CHECK(refused.retry_after == "1");
}

TEST_CASE("stopping the server ends requests still in flight and the process can shut down") {
  served_engine s;
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), s.port));
  http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
  req.set(http::field::host, "127.0.0.1");
  req.body() = R"({"prompt":"Once upon a time","max_tokens":400,"ignore_eos":true})";
  req.prepare_payload();
  http::write(stream, req); // a non-streaming request: the session waits on the engine
  auto running = s.fx.wait_for_stats([](const engine_stats& st) { return st.running == 1; });
  REQUIRE(running.running == 1);
  s.server->stop();
  auto after = s.fx.wait_for_stats([](const engine_stats& st) {
    return st.requests_aborted == 1 && st.running == 0 && st.device_blocks_free == st.device_blocks_total;
  });
  CHECK(after.requests_aborted == 1);
  CHECK(after.device_blocks_free == after.device_blocks_total);
} // the fixture's actor system must shut down here, not hang

TEST_CASE("a non-streaming client that disconnects has its request aborted and its blocks freed") {
  served_engine s;
  {
    asio::io_context ioc;
    beast::tcp_stream stream(ioc);
    stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), s.port));
    http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
    req.set(http::field::host, "127.0.0.1");
    req.body() = R"({"prompt":"Once upon a time","max_tokens":400,"ignore_eos":true})";
    req.prepare_payload();
    http::write(stream, req);
    auto running = s.fx.wait_for_stats([](const engine_stats& st) { return st.running == 1; });
    REQUIRE(running.running == 1);
  } // the socket closes with the request still running
  auto stats = s.fx.wait_for_stats([](const engine_stats& st) {
    return st.requests_aborted == 1 && st.running == 0 && st.device_blocks_free == st.device_blocks_total;
  });
  CHECK(stats.requests_aborted == 1);
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
  CHECK(stats.decode_tokens < 399);
  auto ok = http_call(s.port, http::verb::post, "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":4})");
  CHECK(ok.status == 200);
}

TEST_CASE("keep-alive: requests in a row and a pipelined pair are all answered on one connection") {
  served_engine s;
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), s.port));
  auto request = [](const std::string& body) {
    http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
    req.set(http::field::host, "127.0.0.1");
    req.keep_alive(true);
    req.body() = body;
    req.prepare_payload();
    return req;
  };
  beast::flat_buffer buffer;
  auto read_reply = [&] {
    http::response<http::string_body> res;
    http::read(stream, buffer, res);
    return res;
  };
  for (int i = 0; i < 3; ++i) {
    http::write(stream, request(R"({"prompt":"Once upon a time","max_tokens":5,"temperature":0})"));
    auto res = read_reply();
    CHECK(res.result_int() == 200);
  }
  // Two requests back to back: the second arrives while the first is being generated.
  http::write(stream, request(R"({"prompt":"Once upon a time","max_tokens":20,"temperature":0})"));
  http::write(stream, request(R"({"prompt":"Once upon a time","max_tokens":3,"temperature":0})"));
  auto first = read_reply();
  auto second = read_reply();
  CHECK(first.result_int() == 200);
  CHECK(second.result_int() == 200);
  CHECK(json_of(first.body()).at("usage").at("completion_tokens").as_int64() == 20);
  CHECK(json_of(second.body()).at("usage").at("completion_tokens").as_int64() == 3);
}

TEST_CASE("completions: logprobs and echo as OpenAI returns them, JSON and SSE agree") {
  served_engine s;
  const std::string body =
      R"({"prompt":"Once upon a time","max_tokens":8,"temperature":0,"logprobs":2,"echo":true,"ignore_eos":true})";
  auto r = http_call(s.port, http::verb::post, "/v1/completions", body);
  REQUIRE(r.status == 200);
  auto o = json_of(r.body);
  auto& choice = o.at("choices").at(0).as_object();
  const auto prompt_tokens = o.at("usage").at("prompt_tokens").as_int64();
  CHECK(std::string(choice.at("text").as_string()).starts_with("Once upon a time"));
  auto& lp = choice.at("logprobs").as_object();
  auto& tokens = lp.at("tokens").as_array();
  auto& values = lp.at("token_logprobs").as_array();
  auto& tops = lp.at("top_logprobs").as_array();
  auto& offsets = lp.at("text_offset").as_array();
  REQUIRE(tokens.size() == static_cast<std::size_t>(prompt_tokens + 8));
  CHECK(values.size() == tokens.size());
  CHECK(tops.size() == tokens.size());
  CHECK(offsets.size() == tokens.size());
  CHECK(values[0].is_null()); // nothing predicts the first prompt token
  CHECK(tops[0].is_null());
  for (std::size_t i = 1; i < values.size(); ++i) {
    CAPTURE(i);
    CHECK(values[i].as_double() <= 0.0);
    CHECK(tops[i].as_object().size() >= 1);
    CHECK(tops[i].as_object().size() <= 3); // top 2 plus the chosen token
    CHECK(offsets[i].as_int64() >= offsets[i - 1].as_int64());
  }
  // Greedy: each generated token is its row's most likely one, so it leads its top_logprobs.
  for (auto i = static_cast<std::size_t>(prompt_tokens); i < tokens.size(); ++i) {
    double best = -1e30;
    for (const auto& [k, v] : tops[i].as_object())
      best = std::max(best, v.as_double());
    CHECK(values[i].as_double() == doctest::Approx(best));
  }

  // The stream carries the same tokens and values, chunk by chunk.
  std::string sse_body = body;
  sse_body.insert(sse_body.size() - 1, R"(,"stream":true)");
  auto streamed = http_call(s.port, http::verb::post, "/v1/completions", sse_body);
  REQUIRE(streamed.status == 200);
  CHECK(sse_text(streamed.body, false) == std::string(choice.at("text").as_string()));
  std::vector<double> stream_values;
  std::size_t pos = 0;
  while ((pos = streamed.body.find("data: {", pos)) != std::string::npos) {
    auto end = streamed.body.find("\n\n", pos);
    auto chunk = json_of(streamed.body.substr(pos + 6, end - pos - 6));
    pos = end;
    auto& c = chunk.at("choices").at(0).as_object();
    if (c.at("logprobs").is_null())
      continue;
    for (const auto& v : c.at("logprobs").at("token_logprobs").as_array())
      stream_values.push_back(v.is_null() ? 1.0 : v.as_double());
  }
  REQUIRE(stream_values.size() == values.size());
  for (std::size_t i = 1; i < values.size(); ++i)
    CHECK(stream_values[i] == doctest::Approx(values[i].as_double()));
}

TEST_CASE("chat: logprobs with top_logprobs come as content entries with bytes") {
  served_engine s;
  auto r = http_call(s.port, http::verb::post, "/v1/chat/completions",
                     R"({"messages":[{"role":"user","content":"Tell a story"}],"max_tokens":6,"temperature":0,)"
                     R"("logprobs":true,"top_logprobs":3,"ignore_eos":true})");
  REQUIRE(r.status == 200);
  auto o = json_of(r.body);
  auto& content = o.at("choices").at(0).at("logprobs").at("content").as_array();
  REQUIRE(content.size() == 6);
  for (const auto& e : content) {
    auto& entry = e.as_object();
    CHECK(entry.at("logprob").as_double() <= 0.0);
    CHECK(entry.at("top_logprobs").as_array().size() == 3);
    CHECK(entry.at("bytes").as_array().size() == std::string(entry.at("token").as_string()).size());
  }
  auto plain = http_call(s.port, http::verb::post, "/v1/chat/completions",
                         R"({"messages":[{"role":"user","content":"Tell a story"}],"max_tokens":6})");
  CHECK(json_of(plain.body).at("choices").at(0).at("logprobs").is_null());
  auto bad = http_call(s.port, http::verb::post, "/v1/chat/completions",
                       R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21})");
  CHECK(bad.status == 400);
  CHECK(json_of(bad.body).at("error").at("param").as_string() == "top_logprobs");
}

TEST_CASE("WebSocket: logprobs and echo in delta frames") {
  served_engine s;
  ws_client c(s.port);
  c.send(R"({"type":"generate","id":5,"prompt":"Once upon a time","max_tokens":4,"temperature":0,)"
         R"("logprobs":1,"echo":true,"ignore_eos":true})");
  std::size_t tokens = 0, logprobs = 0;
  std::string prompt_text;
  for (;;) {
    auto f = c.read();
    if (f.at("type") == "done")
      break;
    REQUIRE(f.at("type") == "delta");
    tokens += f.at("token_ids").as_array().size();
    if (auto* lp = f.if_contains("logprobs")) {
      logprobs += lp->as_array().size();
      for (const auto& e : lp->as_array())
        CHECK(e.at("top_logprobs").as_array().size() == 1);
    }
    if (auto* p = f.if_contains("prompt_text"))
      prompt_text += p->as_string().c_str();
  }
  CHECK(tokens == 4);
  CHECK(logprobs == 4);
  CHECK(prompt_text == "Once upon a time");
}

TEST_CASE("server overhead: executor to socket is measured for every streamed chunk") {
  served_engine s;
  ws_client c(s.port);
  c.send(R"({"type":"generate","id":1,"prompt":"Once upon a time","max_tokens":20,"ignore_eos":true})");
  int deltas = 0;
  for (;;) {
    auto f = c.read();
    if (f.at("type") == "done")
      break;
    ++deltas;
  }
  auto sse = http_call(s.port, http::verb::post, "/v1/completions",
                       R"({"prompt":"Once upon a time","max_tokens":10,"ignore_eos":true,"stream":true})");
  REQUIRE(sse.status == 200);
  auto metrics = http_call(s.port, http::verb::get, "/metrics").body;
  auto value_of = [&](const std::string& key) {
    auto at = metrics.find("\n" + key + " ");
    REQUIRE(at != std::string::npos);
    return std::stod(metrics.substr(at + key.size() + 2));
  };
  // Every WebSocket delta and every SSE content chunk (10 tokens may merge into fewer chunks, never none).
  const double count = value_of("troupe:server_overhead_seconds_count");
  CHECK(count >= deltas + 1);
  CHECK(count <= deltas + 10);
  const double p50 = value_of("troupe:server_overhead_seconds{quantile=\"0.5\"}");
  const double p99 = value_of("troupe:server_overhead_seconds{quantile=\"0.99\"}");
  CHECK(p50 > 0.0);
  CHECK(p99 >= p50);
  CHECK(p99 < 1.0); // a bound that only a broken clock or a lost timestamp would break
}

TEST_CASE("API keys: the API needs a valid bearer key, health and metrics stay open, and the server keeps serving") {
  net::server_config cfg;
  cfg.keys = net::api_keys({"sk-test"});
  served_engine s(cfg);
  const std::string body = R"({"prompt":"Once upon a time","max_tokens":4})";
  auto missing = http_call(s.port, http::verb::post, "/v1/completions", body);
  CHECK(missing.status == 401);
  CHECK(json_of(missing.body).at("error").at("code") == "invalid_api_key");
  auto wrong =
      http_call(s.port, http::verb::post, "/v1/completions", body, {{http::field::authorization, "Bearer sk-nope"}});
  CHECK(wrong.status == 401);
  CHECK(http_call(s.port, http::verb::get, "/v1/models").status == 401);
  CHECK(http_call(s.port, http::verb::post, "/tokenize", R"({"prompt":"hi"})").status == 401);
  auto right =
      http_call(s.port, http::verb::post, "/v1/completions", body, {{http::field::authorization, "Bearer sk-test"}});
  CHECK(right.status == 200);
  CHECK(http_call(s.port, http::verb::get, "/health").status == 200);
  CHECK(http_call(s.port, http::verb::get, "/metrics").status == 200);
}

TEST_CASE("API keys: metrics-auth protects /metrics too") {
  net::server_config cfg;
  cfg.keys = net::api_keys({"sk-test"});
  cfg.metrics_auth = true;
  served_engine s(cfg);
  CHECK(http_call(s.port, http::verb::get, "/metrics").status == 401);
  CHECK(http_call(s.port, http::verb::get, "/metrics", {}, {{http::field::authorization, "Bearer sk-test"}}).status ==
        200);
}

TEST_CASE("API keys over WebSocket: in the upgrade header, or as a first auth frame, else an error and a close") {
  net::server_config cfg;
  cfg.keys = net::api_keys({"sk-test"});
  served_engine s(cfg);
  const std::string generate = R"({"type":"generate","id":1,"prompt":"Once upon a time","max_tokens":3})";
  auto read_until_done = [](ws_client& c) {
    for (;;) {
      auto f = c.read();
      if (f.at("type") != "delta")
        return f;
    }
  };
  {
    // The header on the upgrade (non-browser clients).
    asio::io_context ioc;
    websocket::stream<tcp::socket> ws{ioc};
    ws.next_layer().connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), s.port));
    ws.set_option(websocket::stream_base::decorator(
        [](websocket::request_type& r) { r.set(http::field::authorization, "Bearer sk-test"); }));
    ws.handshake("127.0.0.1", "/v1/stream");
    ws.text(true);
    ws.write(asio::buffer(generate));
    std::string type;
    do {
      beast::flat_buffer b;
      ws.read(b);
      type = std::string(json_of(beast::buffers_to_string(b.data())).at("type").as_string());
    } while (type == "delta");
    CHECK(type == "done");
  }
  {
    ws_client browser(s.port); // no header: the first frame authenticates
    browser.send(R"({"type":"auth","key":"sk-test"})");
    browser.send(generate);
    CHECK(read_until_done(browser).at("type") == "done");
  }
  {
    ws_client anonymous(s.port);
    anonymous.send(generate);
    auto f = anonymous.read();
    CHECK(f.at("type") == "error");
    CHECK(f.at("code") == "unauthorized");
    beast::flat_buffer b;
    beast::error_code ec;
    anonymous.ws.read(b, ec);
    CHECK(ec == websocket::error::closed);
    CHECK(anonymous.ws.reason().code == websocket::close_code::policy_error);
  }
  {
    ws_client wrong(s.port);
    wrong.send(R"({"type":"auth","key":"sk-wrong"})");
    auto f = wrong.read();
    CHECK(f.at("code") == "unauthorized");
  }
}

TEST_CASE("CORS: a listed origin's preflight and answers carry the headers, others are refused") {
  net::server_config cfg;
  cfg.cors = net::cors_policy({"https://app.example"});
  served_engine s(cfg);
  auto preflight =
      http_call(s.port, http::verb::options, "/v1/completions", {},
                {{http::field::origin, "https://app.example"}, {http::field::access_control_request_method, "POST"}});
  CHECK(preflight.status == 204);
  CHECK(preflight.allow_origin == "https://app.example");
  auto refused =
      http_call(s.port, http::verb::options, "/v1/completions", {}, {{http::field::origin, "https://evil.example"}});
  CHECK(refused.status == 403);
  const std::string body = R"({"prompt":"Once upon a time","max_tokens":2})";
  auto answer =
      http_call(s.port, http::verb::post, "/v1/completions", body, {{http::field::origin, "https://app.example"}});
  CHECK(answer.status == 200);
  CHECK(answer.allow_origin == "https://app.example");
  auto other =
      http_call(s.port, http::verb::post, "/v1/completions", body, {{http::field::origin, "https://evil.example"}});
  CHECK(other.status == 200); // the server answers; the browser keeps the page from reading it
  CHECK(other.allow_origin.empty());
}

TEST_CASE("logit_bias and min_tokens over WebSocket and HTTP, and a bias outside the vocabulary is a clear error") {
  served_engine s;
  ws_client c(s.port);
  // Collects one WebSocket request's token ids and its done frame.
  auto generate = [&](const std::string& fields) {
    c.send(R"({"type":"generate","id":1,"prompt":"Once upon a time","temperature":0,)" + fields + "}");
    std::vector<std::int64_t> ids;
    for (;;) {
      auto f = c.read();
      REQUIRE(f.at("type") != "error");
      if (f.at("type") == "done")
        return std::pair{ids, f};
      for (const auto& id : f.at("token_ids").as_array())
        ids.push_back(id.as_int64());
    }
  };
  // +100 on one token: greedy picks it every time.
  auto [forced, forced_done] = generate(R"("max_tokens":5,"ignore_eos":true,"logit_bias":{"300":100})");
  CHECK(forced == std::vector<std::int64_t>(5, 300));
  // +100 on a stop id ends at once; with min_tokens 5 it is masked until 5 other tokens are out.
  auto [at_once, at_once_done] = generate(R"("max_tokens":20,"stop_token_ids":[2],"logit_bias":{"2":100})");
  CHECK(at_once == std::vector<std::int64_t>{2});
  CHECK(at_once_done.at("finish_reason") == "stop");
  auto [five, five_done] = generate(R"("max_tokens":20,"stop_token_ids":[2],"logit_bias":{"2":100},"min_tokens":5)");
  REQUIRE(five.size() == 6);
  CHECK(five.back() == 2);
  for (std::size_t i = 0; i < 5; ++i)
    CHECK((five[i] != 1 && five[i] != 2)); // no stop id of the model's either
  CHECK(five_done.at("finish_reason") == "stop");
  CHECK(five_done.at("usage").at("completion_tokens").as_int64() == 6);

  // HTTP agrees: the same request's usage and finish reason, JSON and SSE.
  const std::string request = R"({"prompt":"Once upon a time","max_tokens":20,"temperature":0,)"
                              R"("stop_token_ids":[2],"logit_bias":{"2":100},"min_tokens":5)";
  auto plain = http_call(s.port, http::verb::post, "/v1/completions", request + "}");
  REQUIRE(plain.status == 200);
  auto body = json_of(plain.body);
  CHECK(body.at("usage").at("completion_tokens").as_int64() == 6);
  CHECK(body.at("choices").as_array()[0].at("finish_reason") == "stop");
  const std::string text = body.at("choices").as_array()[0].at("text").as_string().c_str();
  CHECK_FALSE(text.empty());
  auto streamed = http_call(s.port, http::verb::post, "/v1/completions", request + R"(,"stream":true})");
  REQUIRE(streamed.status == 200);
  std::string finish;
  CHECK(sse_text(streamed.body, false, &finish) == text);
  CHECK(finish == "stop");
  auto chat = http_call(s.port, http::verb::post, "/v1/chat/completions",
                        R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"temperature":0,)"
                        R"("logit_bias":{"300":100}})");
  REQUIRE(chat.status == 200);
  CHECK(json_of(chat.body).at("usage").at("completion_tokens").as_int64() == 4);

  // A token id past the vocabulary (512 tokens): a 400 naming it, over HTTP and WebSocket; the server keeps serving.
  auto outside = http_call(s.port, http::verb::post, "/v1/completions",
                           R"({"prompt":"Once","max_tokens":4,"logit_bias":{"512":5}})");
  CHECK(outside.status == 400);
  CHECK(outside.body.find("logit_bias token id 512 is outside the vocabulary") != std::string::npos);
  c.send(R"({"type":"generate","id":2,"prompt":"Once","max_tokens":4,"logit_bias":{"9999":1}})");
  auto error = c.read();
  CHECK(error.at("type") == "error");
  CHECK(std::string(error.at("message").as_string().c_str()).find("outside the vocabulary") != std::string::npos);
  auto bad_range = http_call(s.port, http::verb::post, "/v1/completions",
                             R"({"prompt":"Once","max_tokens":4,"logit_bias":{"5":101}})");
  CHECK(bad_range.status == 400);
  auto [again, again_done] = generate(R"("max_tokens":5,"ignore_eos":true,"logit_bias":{"300":100})");
  CHECK(again == forced);
}

TEST_CASE(
    "n = 4 over HTTP, SSE and WebSocket gives four choices with distinct indexes; best_of and bad n are handled") {
  served_engine s;
  const std::string fields = R"("prompt":"Once upon a time","max_tokens":8,"seed":3,"ignore_eos":true,"n":4)";
  // JSON: four choices in index order, each its own text, usage over all of them.
  auto plain = http_call(s.port, http::verb::post, "/v1/completions", "{" + fields + "}");
  REQUIRE(plain.status == 200);
  auto body = json_of(plain.body);
  const auto& choices = body.at("choices").as_array();
  REQUIRE(choices.size() == 4);
  std::vector<std::string> texts;
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(choices[i].at("index").as_int64() == static_cast<std::int64_t>(i));
    CHECK(choices[i].at("finish_reason") == "length");
    texts.emplace_back(choices[i].at("text").as_string().c_str());
  }
  CHECK(body.at("usage").at("completion_tokens").as_int64() == 32);
  CHECK(std::set<std::string>(texts.begin(), texts.end()).size() > 1);

  // SSE: every chunk names its choice; each choice's text is the JSON one, and it ends with one finish chunk.
  auto streamed = http_call(s.port, http::verb::post, "/v1/completions", "{" + fields + R"(,"stream":true})");
  REQUIRE(streamed.status == 200);
  std::map<std::int64_t, std::string> sse_texts;
  std::map<std::int64_t, int> finishes;
  std::size_t at = 0;
  while ((at = streamed.body.find("data: ", at)) != std::string::npos) {
    const auto end = streamed.body.find("\n\n", at);
    const auto data = streamed.body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]")
      break;
    const auto chunk = json_of(data);
    for (const auto& c : chunk.at("choices").as_array()) {
      const auto index = c.at("index").as_int64();
      sse_texts[index] += c.at("text").as_string().c_str();
      if (!c.at("finish_reason").is_null())
        ++finishes[index];
    }
  }
  REQUIRE(sse_texts.size() == 4);
  for (std::int64_t i = 0; i < 4; ++i) {
    CHECK(sse_texts[i] == texts[static_cast<std::size_t>(i)]);
    CHECK(finishes[i] == 1);
  }

  // WebSocket: deltas carry their index, each choice's last one its finish_reason, then one done frame.
  ws_client c(s.port);
  c.send(R"({"type":"generate","id":"w",)" + fields + "}");
  std::map<std::int64_t, std::string> ws_texts;
  std::map<std::int64_t, std::string> ws_finish;
  for (;;) {
    auto f = c.read();
    REQUIRE(f.at("type") != "error");
    if (f.at("type") == "done") {
      CHECK(f.at("usage").at("completion_tokens").as_int64() == 32);
      break;
    }
    const auto index = f.at("index").as_int64();
    ws_texts[index] += f.at("text").as_string().c_str();
    if (auto* reason = f.if_contains("finish_reason"))
      ws_finish[index] = reason->as_string().c_str();
  }
  REQUIRE(ws_texts.size() == 4);
  for (std::int64_t i = 0; i < 4; ++i) {
    CHECK(ws_texts[i] == texts[static_cast<std::size_t>(i)]);
    CHECK(ws_finish[i] == "length");
  }

  // best_of = 4, n = 2: two choices, and usage counts the four generated.
  auto best = http_call(s.port, http::verb::post, "/v1/completions",
                        R"({"prompt":"Once upon a time","max_tokens":8,"seed":3,"ignore_eos":true,"n":2,"best_of":4})");
  REQUIRE(best.status == 200);
  auto best_body = json_of(best.body);
  CHECK(best_body.at("choices").as_array().size() == 2);
  CHECK(best_body.at("usage").at("completion_tokens").as_int64() == 32);
  // Chat with n = 2.
  auto chat = http_call(s.port, http::verb::post, "/v1/chat/completions",
                        R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"n":2,"seed":1})");
  REQUIRE(chat.status == 200);
  CHECK(json_of(chat.body).at("choices").as_array().size() == 2);

  // Bad values are 400s naming the field; the server keeps serving.
  auto zero = http_call(s.port, http::verb::post, "/v1/completions", R"({"prompt":"Once","n":0})");
  CHECK(zero.status == 400);
  CHECK(json_of(zero.body).at("error").at("param") == "n");
  auto seats = http_call(s.port, http::verb::post, "/v1/completions", R"({"prompt":"Once","n":65,"max_tokens":2})");
  CHECK(seats.status == 400);
  CHECK(seats.body.find("n = 65 needs 65 sequences at once; this engine runs at most 64") != std::string::npos);
  auto stream_best =
      http_call(s.port, http::verb::post, "/v1/completions", R"({"prompt":"Once","n":1,"best_of":2,"stream":true})");
  CHECK(stream_best.status == 400);
  CHECK(json_of(stream_best.body).at("error").at("param") == "best_of");
  auto again = http_call(s.port, http::verb::post, "/v1/completions", "{" + fields + "}");
  REQUIRE(again.status == 200);
  CHECK(json_of(again.body).at("choices").as_array().size() == 4);
}
