// troupe's server on 127.0.0.1 with an ephemeral port, driven by Beast
// clients: WebSocket streaming with interleaved requests and cancel, OpenAI
// completions and chat (JSON and SSE) agreeing with each other and with the
// golden greedy output, and bad input answered with the exact status or frame
// while the server keeps serving.
#include <doctest/doctest.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>

#include <map>

#include "net/server.hpp"
#include "tests/support/engine_harness.hpp"

using namespace troupe;
using namespace troupe::testing;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

struct served_engine {
  engine_fixture fx;
  std::unique_ptr<net::server> server;
  std::uint16_t port = 0;

  explicit served_engine(net::server_config scfg = {}) : fx(stories_engine_config()) {
    model_info info;
    caf::scoped_actor self{fx.sys};
    self->request(fx.engine, caf::infinite, info_atom::value)
        .receive([&](model_info& i) { info = std::move(i); }, [](caf::error& e) { FAIL(to_string(e)); });
    scfg.port = 0;
    server = std::make_unique<net::server>(fx.sys, fx.engine, info, scfg);
    port = server->start();
  }
  ~served_engine() { server->stop(); }
};

struct http_reply {
  int status = 0;
  std::string body;
  std::string retry_after;
};

http_reply http_call(std::uint16_t port, http::verb verb, const std::string& target, const std::string& body = {}) {
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  http::request<http::string_body> req{verb, target, 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  beast::error_code write_ec;
  http::write(stream, req, write_ec);  // a server that refuses a body may answer before reading it all
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  beast::error_code ec;
  http::read(stream, buffer, parser, ec);  // SSE bodies end at close: end_of_stream is fine
  auto res = parser.release();
  return {static_cast<int>(res.result_int()), res.body(), std::string(res[http::field::retry_after])};
}

boost::json::object json_of(const std::string& text) { return boost::json::parse(text).as_object(); }

// The text of an SSE stream: the concatenation of every chunk's text / delta.content.
std::string sse_text(const std::string& body, bool chat, std::string* finish_reason = nullptr) {
  std::string text;
  std::size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    auto end = body.find("\n\n", pos);
    auto payload = body.substr(pos + 6, end - pos - 6);
    pos = end;
    if (payload == "[DONE]")
      break;
    auto chunk = json_of(payload);
    auto& choices = chunk.at("choices").as_array();
    if (choices.empty())
      continue;
    auto& c = choices[0].as_object();
    if (chat) {
      if (auto* content = c.at("delta").as_object().if_contains("content"))
        text += content->as_string().c_str();
    } else {
      text += c.at("text").as_string().c_str();
    }
    if (finish_reason && !c.at("finish_reason").is_null())
      *finish_reason = c.at("finish_reason").as_string().c_str();
  }
  return text;
}

struct ws_client {
  asio::io_context ioc;
  websocket::stream<tcp::socket> ws{ioc};
  explicit ws_client(std::uint16_t port) {
    ws.next_layer().connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    ws.handshake("127.0.0.1", "/v1/stream");
  }
  void send(const std::string& text) {
    ws.text(true);
    ws.write(asio::buffer(text));
  }
  boost::json::object read() {
    beast::flat_buffer buffer;
    ws.read(buffer);
    return json_of(beast::buffers_to_string(buffer.data()));
  }
};

const std::string golden_first_text = ", there was a little girl named Lily. She loved to play outside in the park. One "
                                      "day, she saw a big, red ball. She wanted to play with it, but it was too "
                                      "high.\nLily's mom said";

} // namespace

TEST_CASE("WebSocket: two interleaved requests stream their golden text and end with done frames") {
  served_engine s;
  ws_client c(s.port);
  c.send(R"({"type":"generate","id":"a","prompt":"Once upon a time","max_tokens":64,"temperature":0,"ignore_eos":true})");
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
  const std::string request =
      R"({"prompt":"Once upon a time","max_tokens":64,"temperature":0,"ignore_eos":true)";
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
  CHECK(too_long_stream.status == 400);  // refused before any chunk: a plain error, not a stream
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
    c.read();  // the first delta: it is running
    c.ws.next_layer().close();  // no close handshake
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
  http::write(stream, req);  // a non-streaming request: the session waits on the engine
  auto running = s.fx.wait_for_stats([](const engine_stats& st) { return st.running == 1; });
  REQUIRE(running.running == 1);
  s.server->stop();
  auto after = s.fx.wait_for_stats([](const engine_stats& st) {
    return st.requests_aborted == 1 && st.running == 0 && st.device_blocks_free == st.device_blocks_total;
  });
  CHECK(after.requests_aborted == 1);
  CHECK(after.device_blocks_free == after.device_blocks_total);
}  // the fixture's actor system must shut down here, not hang
