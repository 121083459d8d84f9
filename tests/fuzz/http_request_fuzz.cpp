// Fuzzes what the HTTP server does with a connection's bytes before it asks the engine:
// Beast's request_parser with the server's header and body limits (as net/http_session
// sets them, requests read one after another as when pipelined), then the header reads
// (API key, CORS origin) and the body parsers of /v1/completions and /v1/chat/completions.
#include <boost/beast/http.hpp>
#include <boost/beast/websocket/rfc6455.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "fuzz_support.hpp"
#include "net/http_response.hpp"
#include "net/openai_requests.hpp"
#include "net/server.hpp"

namespace {

namespace http = boost::beast::http;
using namespace troupe;
using namespace troupe::net;
using fuzz::check;

// The server's defaults, with the optional checks on so that the header reads run.
const server_config& config() {
  static const server_config cfg = [] {
    server_config c;
    c.keys = api_keys({"sk-fuzz-key"});
    c.cors = cors_policy({"*"});
    return c;
  }();
  return cfg;
}

// Header lines we write ourselves from a request's header: no CR or LF but the line ends,
// or a client could add headers (or a body) to our answer.
void check_header_lines(std::string_view lines) {
  std::size_t start = 0;
  while (start < lines.size()) {
    const auto end = lines.find("\r\n", start);
    check(end != std::string_view::npos, "header lines end in CRLF", lines);
    const auto line = lines.substr(start, end - start);
    check(line.find_first_of("\r\n") == std::string_view::npos, "no CR or LF inside a header line", lines);
    start = end + 2;
  }
}

void handle(const http::request<http::string_body>& req) {
  const auto& cfg = config();
  check(req.body().size() <= cfg.max_body_bytes, "the body is within the limit");
  (void)req.keep_alive();
  (void)boost::beast::websocket::is_upgrade(req);
  (void)cfg.keys.accepts_authorization(req[http::field::authorization]);
  const std::string origin(req[http::field::origin]);
  check_header_lines(cfg.cors.response_headers(origin));
  if (req.method() == http::verb::options) {
    const auto answer = cfg.cors.preflight_response(origin, req.keep_alive());
    const auto head_end = answer.find("\r\n\r\n");
    check(head_end != std::string::npos, "the preflight answer has a header");
    check_header_lines(std::string_view(answer).substr(0, head_end + 2));
  }
  const auto target = req.target();
  if (req.method() != http::verb::post)
    return;
  if (target == "/v1/completions") {
    const auto parsed = parse_completion_request(req.body(), cfg.limits);
    if (const auto* e = std::get_if<api_error>(&parsed))
      check(fuzz::parses_as_json(openai_error_body(*e)), "the error body is JSON");
  } else if (target == "/v1/chat/completions") {
    const auto parsed = parse_chat_request(req.body(), cfg.limits);
    if (const auto* e = std::get_if<api_error>(&parsed))
      check(fuzz::parses_as_json(openai_error_body(*e)), "the error body is JSON");
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& cfg = config();
  std::string_view rest = fuzz::as_text(data, size);
  // One parser per request, as the session does; the bytes after one request are the next.
  for (int requests = 0; requests < 16; ++requests) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(cfg.max_body_bytes);
    parser.header_limit(static_cast<std::uint32_t>(cfg.max_header_bytes));
    parser.eager(true); // as http::async_read reads a whole message
    boost::beast::error_code ec;
    // One put() parses all it can of what it is given (eager), so a message not done means
    // the input ran out: then the connection ends, as async_read would see it. put() is not
    // called again without new bytes (Beast's reads never do; its chunk parser asserts so).
    const auto used = parser.put(boost::asio::buffer(rest.data(), rest.size()), ec);
    check(used <= rest.size(), "the parser consumed at most what it was given");
    rest.remove_prefix(used);
    if (ec == http::error::need_more || (!ec && !parser.is_done())) {
      if (!parser.got_some())
        return 0; // the connection ends between requests (Beast: end_of_stream)
      ec = {};
      parser.put_eof(ec); // the connection ends inside a request
    }
    if (ec || !parser.is_done())
      return 0; // the session answers 400/413/431 and closes
    handle(parser.release());
    if (rest.empty())
      return 0;
  }
  return 0;
}
