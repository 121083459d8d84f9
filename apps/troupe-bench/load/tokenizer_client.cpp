// Synchronous Beast requests on one connection; a connection the server closed between
// requests (keep-alive timeout) is opened again once.
#include "apps/troupe-bench/load/tokenizer_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include <limits>
#include <stdexcept>

namespace troupe::bench {

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = boost::asio::ip::tcp;

// The message of an OpenAI error body, else the body itself.
std::string error_message(const std::string& body) {
  boost::system::error_code ec;
  auto v = json::parse(body, ec);
  if (!ec && v.is_object())
    if (auto* e = v.as_object().if_contains("error"); e && e->is_object())
      if (auto* m = e->as_object().if_contains("message"); m && m->is_string())
        return std::string(m->as_string());
  return body;
}

json::object parse_object(const std::string& body, std::string_view route) {
  boost::system::error_code ec;
  auto v = json::parse(body, ec);
  if (ec || !v.is_object())
    throw std::runtime_error(std::string(route) +
                             " answered something that is not a JSON object: " + body.substr(0, 200));
  return std::move(v.as_object());
}

} // namespace

tokenizer_client::tokenizer_client(const endpoint& server) : server_(server), stream_(ioc_) {
  connect();
}

void tokenizer_client::connect() {
  try {
    tcp::resolver resolver(ioc_);
    beast::error_code ignored;
    stream_.socket().close(ignored); // a connection the server ended
    stream_.connect(resolver.resolve(server_.host, server_.port));
    stream_.socket().set_option(tcp::no_delay(true));
    connected_ = true;
  } catch (const boost::system::system_error& e) {
    throw unreachable_error("cannot connect to http://" + server_.host_header() +
                            " (for /tokenize): " + e.code().message());
  }
}

tokenizer_client::reply tokenizer_client::post_once(std::string_view target, const std::string& body) {
  http::request<http::string_body> req{http::verb::post, target, 11};
  req.set(http::field::host, server_.host_header());
  req.set(http::field::content_type, "application/json");
  req.keep_alive(true);
  req.body() = body;
  req.prepare_payload();
  http::write(stream_, req);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  http::read(stream_, buffer, parser);
  auto res = parser.release();
  if (!res.keep_alive())
    connected_ = false;
  return {res.result_int(), std::move(res.body())};
}

tokenizer_client::reply tokenizer_client::post(std::string_view target, std::string body) {
  if (!connected_)
    connect();
  try {
    return post_once(target, body);
  } catch (const boost::system::system_error&) {
    connect(); // the server may have closed an idle keep-alive connection: once more on a new one
  }
  try {
    return post_once(target, body);
  } catch (const boost::system::system_error& e) {
    connected_ = false;
    throw std::runtime_error("POST " + std::string(target) + " to " + server_.host_header() + ": " +
                             e.code().message());
  }
}

std::vector<token_id> tokenizer_client::encode(const std::string& text) {
  auto r = post("/tokenize", json::serialize(json::object{{"prompt", text}, {"add_special_tokens", false}}));
  if (r.status != 200)
    throw std::runtime_error("POST /tokenize: HTTP " + std::to_string(r.status) + ": " + error_message(r.body));
  auto answer = parse_object(r.body, "/tokenize");
  std::vector<token_id> ids;
  if (auto* tokens = answer.if_contains("tokens"); tokens && tokens->is_array())
    for (const auto& t : tokens->as_array()) {
      if (!t.is_int64())
        throw std::runtime_error("/tokenize answered a token that is not an integer: " + json::serialize(t));
      ids.push_back(static_cast<token_id>(t.as_int64()));
    }
  else
    throw std::runtime_error("/tokenize answered no 'tokens' array: " + r.body.substr(0, 200));
  return ids;
}

std::string tokenizer_client::decode(const std::vector<token_id>& ids) {
  json::array tokens(ids.begin(), ids.end());
  auto r = post("/detokenize", json::serialize(json::object{{"tokens", std::move(tokens)}}));
  if (r.status != 200)
    throw std::runtime_error("POST /detokenize: HTTP " + std::to_string(r.status) + ": " + error_message(r.body));
  auto answer = parse_object(r.body, "/detokenize");
  auto* prompt = answer.if_contains("prompt");
  if (!prompt || !prompt->is_string())
    throw std::runtime_error("/detokenize answered no 'prompt' string: " + r.body.substr(0, 200));
  return std::string(prompt->as_string());
}

bool tokenizer_client::accepts(token_id id) {
  auto r = post("/detokenize", json::serialize(json::object{{"tokens", json::array{id}}}));
  if (r.status == 200)
    return true;
  if (r.status == 400)
    return false;
  throw std::runtime_error("POST /detokenize: HTTP " + std::to_string(r.status) + ": " + error_message(r.body));
}

token_id tokenizer_client::probe_vocab_size() {
  constexpr token_id top = std::numeric_limits<token_id>::max();
  if (!accepts(0))
    throw std::runtime_error(
        "the server's /detokenize refuses token id 0, so the vocabulary size cannot be found "
        "from it: give --vocab-limit");
  token_id taken = 0, refused = 1; // invariant once the doubling ends: taken accepted, refused not
  while (accepts(refused)) {
    if (refused == top)
      throw std::runtime_error(
          "the server's /detokenize accepts any token id, so the vocabulary size cannot be "
          "found from it: give --vocab-limit");
    taken = refused;
    refused = refused > top / 2 ? top : refused * 2;
  }
  while (refused - taken > 1) {
    const token_id mid = taken + (refused - taken) / 2;
    (accepts(mid) ? taken : refused) = mid;
  }
  return refused;
}

} // namespace troupe::bench
