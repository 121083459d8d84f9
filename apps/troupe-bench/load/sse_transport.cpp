// SSE transport: POST /v1/completions, then the body is read as it arrives
// (read_some, not read, so each chunk is timed when it lands) and split into `data:` lines.
#include "apps/troupe-bench/load/sse_transport.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <array>

#include "apps/troupe-bench/load/stream_events.hpp"

namespace troupe::bench {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;
constexpr auto use_awaitable = asio::use_awaitable;

class sse_transport final : public transport {
 public:
  sse_transport(asio::io_context& ioc, endpoint server, sampling_settings sampling)
      : ioc_(ioc), server_(std::move(server)), sampling_(sampling) {}

  asio::awaitable<void> open() override {
    addresses_ = co_await resolve_server(server_);
    // Every request connects on its own; check once that the server accepts a connection.
    try {
      beast::tcp_stream probe(co_await asio::this_coro::executor);
      co_await probe.async_connect(addresses_, use_awaitable);
    } catch (const boost::system::system_error& e) {
      throw unreachable_error("cannot connect to http://" + server_.host_header() + ": " + e.code().message());
    }
  }

  asio::any_io_executor executor_for(std::size_t) override { return asio::make_strand(ioc_); }

  asio::awaitable<void> run(const bench_request& request, request_record& record, const bench_clock& clock) override {
    http::request<http::string_body> post{http::verb::post, server_.path, 11};
    post.set(http::field::host, server_.host_header());
    post.set(http::field::content_type, "application/json");
    post.set(http::field::accept, "text/event-stream");
    post.body() = completions_body(request, sampling_);
    post.prepare_payload();

    record.send_s = clock.now();
    try {
      beast::tcp_stream stream(co_await asio::this_coro::executor);
      co_await stream.async_connect(addresses_, use_awaitable);
      stream.socket().set_option(tcp::no_delay(true));
      co_await http::async_write(stream, post, use_awaitable);

      beast::flat_buffer buffer;
      http::response_parser<http::empty_body> head;
      co_await http::async_read_header(stream, buffer, head, use_awaitable);
      if (head.get().result() != http::status::ok) {
        co_await read_refusal(stream, buffer, head, record, clock);
        co_return;
      }
      if (co_await read_events(stream, buffer, head, record, clock))
        co_return;
      record_failure(record, clock, "the SSE stream ended before [DONE]");
    } catch (const boost::system::system_error& e) {
      record_failure(record, clock, "HTTP: " + e.code().message());
    }
  }

  asio::awaitable<void> close() override { co_return; }

 private:
  // A status other than 200: the body is an OpenAI error; its message is the failure.
  // (Beast parsers do not move, but one can take over another's parsed header.)
  static asio::awaitable<void> read_refusal(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                                            http::response_parser<http::empty_body>& head, request_record& record,
                                            const bench_clock& clock) {
    const int status = head.get().result_int();
    http::response_parser<http::string_body> whole(std::move(head));
    error_code ec;
    co_await http::async_read(stream, buffer, whole, asio::redirect_error(use_awaitable, ec));
    auto event = read_sse_data(whole.get().body());
    record_failure(record, clock,
                   "HTTP " + std::to_string(status) + ": " + (event.error.empty() ? whole.get().body() : event.error));
  }

  // Reads the event stream until the request ends; false if the body ended first.
  static asio::awaitable<bool> read_events(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                                           http::response_parser<http::empty_body>& head, request_record& record,
                                           const bench_clock& clock) {
    http::response_parser<http::buffer_body> body(std::move(head));
    body.body_limit(boost::none); // a stream is as long as the output
    sse_splitter splitter;
    std::array<char, 16384> chunk;
    bool ended = false;
    while (!ended && !body.is_done()) {
      body.get().body().data = chunk.data();
      body.get().body().size = chunk.size();
      error_code ec;
      co_await http::async_read_some(stream, buffer, body, asio::redirect_error(use_awaitable, ec));
      const double t = clock.now();
      if (ec == http::error::need_buffer)
        ec = {}; // the chunk buffer is full: not an error
      std::string_view bytes(chunk.data(), chunk.size() - body.get().body().size);
      splitter.feed(bytes, [&](std::string_view data) {
        if (!ended)
          ended = apply_event(read_sse_data(data), t, record);
      });
      if (ec && !ended)
        throw boost::system::system_error(ec);
    }
    co_return ended;
  }

  asio::io_context& ioc_;
  endpoint server_;
  sampling_settings sampling_;
  tcp::resolver::results_type addresses_;
};

} // namespace

std::unique_ptr<transport> make_sse_transport(asio::io_context& ioc, const endpoint& server,
                                              const sampling_settings& sampling) {
  return std::make_unique<sse_transport>(ioc, server, sampling);
}

} // namespace troupe::bench
