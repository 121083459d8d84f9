// troupe's server in-process on 127.0.0.1 with an ephemeral port and the
// bundled model, and the Beast clients the net tests drive it with. The
// exchange helpers take any stream, so a test over TLS uses them as they are.
#pragma once

#include <doctest/doctest.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "net/server.hpp"
#include "tests/support/engine_harness.hpp"

namespace troupe::testing {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

struct served_engine {
  engine_fixture fx;
  std::unique_ptr<net::server> server;
  std::uint16_t port = 0;

  explicit served_engine(net::server_config scfg = {}) : served_engine(stories_engine_config(), std::move(scfg)) {}
  // Another engine configuration, e.g. stories260k's files in a folder with its own chat template.
  explicit served_engine(engine_config ecfg, net::server_config scfg = {}) : fx(std::move(ecfg)) {
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

inline tcp::endpoint local_endpoint(std::uint16_t port) {
  return tcp::endpoint(asio::ip::make_address("127.0.0.1"), port);
}

struct http_reply {
  int status = 0; // 0: no response head arrived
  std::string body;
  std::string retry_after;
  std::string allow_origin;     // Access-Control-Allow-Origin
  beast::error_code read_error; // how reading ended; end_of_stream is a clean end of a close-delimited body
};

using header_list = std::vector<std::pair<http::field, std::string>>;

inline http::request<http::string_body> make_request(http::verb verb, const std::string& target,
                                                     const std::string& body = {}, const header_list& headers = {}) {
  http::request<http::string_body> req{verb, target, 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::content_type, "application/json");
  for (const auto& [field, value] : headers)
    req.set(field, value);
  req.body() = body;
  req.prepare_payload();
  return req;
}

// Writes the request and reads one response (an SSE body ends at the close).
template <class Stream>
http_reply exchange(Stream& stream, beast::flat_buffer& buffer, const http::request<http::string_body>& req) {
  beast::error_code write_ec;
  http::write(stream, req, write_ec); // a server that refuses a body may answer before reading it all
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  http_reply r;
  http::read(stream, buffer, parser, r.read_error);
  if (!parser.is_header_done())
    return r;
  auto res = parser.release();
  r.status = static_cast<int>(res.result_int());
  r.body = res.body();
  r.retry_after = std::string(res[http::field::retry_after]);
  r.allow_origin = std::string(res[http::field::access_control_allow_origin]);
  return r;
}

// One request on a fresh plain connection.
inline http_reply http_call(std::uint16_t port, http::verb verb, const std::string& target,
                            const std::string& body = {}, const header_list& headers = {}) {
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.connect(local_endpoint(port));
  beast::flat_buffer buffer;
  return exchange(stream, buffer, make_request(verb, target, body, headers));
}

inline boost::json::object json_of(const std::string& text) {
  return boost::json::parse(text).as_object();
}

// The text of an SSE stream: the concatenation of every chunk's text / delta.content.
inline std::string sse_text(const std::string& body, bool chat, std::string* finish_reason = nullptr) {
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

// Frames on any websocket::stream (plain or TLS).
template <class WebSocket>
void ws_send(WebSocket& ws, const std::string& text) {
  ws.text(true);
  ws.write(asio::buffer(text));
}

template <class WebSocket>
boost::json::object ws_read(WebSocket& ws) {
  beast::flat_buffer buffer;
  ws.read(buffer);
  return json_of(beast::buffers_to_string(buffer.data()));
}

// One request's frames until its done or error frame (which is returned); its delta text is appended to `text`.
template <class WebSocket>
boost::json::object ws_read_to_end(WebSocket& ws, std::string* text = nullptr) {
  for (;;) {
    auto f = ws_read(ws);
    if (f.at("type") != "delta")
      return f;
    if (text)
      *text += f.at("text").as_string().c_str();
  }
}

struct ws_client {
  asio::io_context ioc;
  websocket::stream<tcp::socket> ws{ioc};
  explicit ws_client(std::uint16_t port, const std::string& bearer_key = {}) {
    ws.next_layer().connect(local_endpoint(port));
    if (!bearer_key.empty())
      ws.set_option(websocket::stream_base::decorator(
          [bearer_key](websocket::request_type& r) { r.set(http::field::authorization, "Bearer " + bearer_key); }));
    ws.handshake("127.0.0.1", "/v1/stream");
  }
  void send(const std::string& text) { ws_send(ws, text); }
  boost::json::object read() { return ws_read(ws); }
};

// The bundled model's greedy continuation of "Once upon a time" (64 tokens).
inline const std::string golden_first_text =
    ", there was a little girl named Lily. She loved to play outside in the park. One "
    "day, she saw a big, red ball. She wanted to play with it, but it was too "
    "high.\nLily's mom said";

} // namespace troupe::testing
