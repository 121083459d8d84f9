// WebSocket transport: a generate frame out, delta frames back until done or error.
// A shared connection runs everything on its strand: one reader routes frames to
// requests by id, one writer sends frames in order, and each request waits on a timer
// that the reader cancels when the request ends.
#include "apps/troupe-bench/load/ws_transport.hpp"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

#include <deque>
#include <unordered_map>
#include <vector>

#include "apps/troupe-bench/load/stream_events.hpp"

namespace troupe::bench {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using ws_stream = websocket::stream<beast::tcp_stream>;
using strand = asio::strand<asio::io_context::executor_type>;
constexpr auto use_awaitable = asio::use_awaitable;

asio::awaitable<void> connect(ws_stream& ws, const tcp::resolver::results_type& addresses, const endpoint& server) {
  co_await beast::get_lowest_layer(ws).async_connect(addresses, use_awaitable);
  beast::get_lowest_layer(ws).socket().set_option(tcp::no_delay(true));
  // The WebSocket's own timeouts take over from the TCP stream's.
  beast::get_lowest_layer(ws).expires_never();
  ws.set_option(websocket::stream_base::timeout::suggested(beast::role_type::client));
  co_await ws.async_handshake(server.host_header(), server.path, use_awaitable);
  ws.text(true);
}

std::string frame_text(const beast::flat_buffer& buffer) {
  return beast::buffers_to_string(buffer.data());
}

// One WebSocket carrying many requests. Every member is touched only on `strand_`.
class shared_connection {
 public:
  explicit shared_connection(asio::io_context& ioc) : strand_(asio::make_strand(ioc)), ws_(strand_) {}

  strand executor() const { return strand_; }

  asio::awaitable<void> open(const tcp::resolver::results_type& addresses, const endpoint& server) {
    co_await connect(ws_, addresses, server);
    asio::co_spawn(strand_, read_loop(), asio::detached);
  }

  asio::awaitable<void> run(std::string frame, std::int64_t id, request_record& record, const bench_clock& clock) {
    record.send_s = clock.now();
    if (!broken_.empty()) {
      record_failure(record, clock, broken_);
      co_return;
    }
    asio::steady_timer wake(strand_, asio::steady_timer::time_point::max());
    pending p{&record, &clock, &wake};
    pending_[id] = &p;
    send(std::move(frame));
    while (!p.ended) {
      error_code cancelled; // the reader (or a failure) cancels the wait when the request ends
      co_await wake.async_wait(asio::redirect_error(use_awaitable, cancelled));
    }
  }

  asio::awaitable<void> close() {
    closing_ = true;
    if (!broken_.empty())
      co_return;
    error_code ignored;
    co_await ws_.async_close(websocket::close_code::normal, asio::redirect_error(use_awaitable, ignored));
  }

 private:
  struct pending {
    request_record* record;
    const bench_clock* clock;
    asio::steady_timer* wake;
    bool ended = false;
  };

  void send(std::string frame) {
    writes_.push_back(std::move(frame));
    if (!writing_) {
      writing_ = true;
      asio::co_spawn(strand_, write_loop(), asio::detached);
    }
  }

  asio::awaitable<void> write_loop() {
    while (!writes_.empty()) {
      error_code ec;
      co_await ws_.async_write(asio::buffer(writes_.front()), asio::redirect_error(use_awaitable, ec));
      writes_.pop_front();
      if (ec) {
        writes_.clear();
        fail_all("sending on the connection failed: " + ec.message());
      }
    }
    writing_ = false;
  }

  asio::awaitable<void> read_loop() {
    beast::flat_buffer buffer;
    for (;;) {
      error_code ec;
      co_await ws_.async_read(buffer, asio::redirect_error(use_awaitable, ec));
      const auto arrived = std::chrono::steady_clock::now();
      if (ec) {
        std::string why = "the connection was lost: " + ec.message();
        if (!ws_.reason().reason.empty())
          why += " (" + std::string(ws_.reason().reason.c_str()) + ")";
        fail_all(closing_ ? "the connection was closed" : why);
        co_return;
      }
      auto event = read_ws_frame(frame_text(buffer));
      buffer.consume(buffer.size());
      auto it = event.id ? pending_.find(*event.id) : pending_.end();
      if (it == pending_.end())
        continue; // no request to give it to (an error about an unreadable frame has id null)
      pending& p = *it->second;
      if (apply_event(event, p.clock->since_start(arrived), *p.record)) {
        pending_.erase(it);
        p.ended = true;
        p.wake->cancel();
      }
    }
  }

  // The connection is unusable: every request on it fails now, and later ones at once.
  void fail_all(const std::string& why) {
    if (broken_.empty())
      broken_ = why;
    for (auto& [id, p] : pending_) {
      record_failure(*p->record, *p->clock, why);
      p->ended = true;
      p->wake->cancel();
    }
    pending_.clear();
  }

  strand strand_;
  ws_stream ws_;
  std::unordered_map<std::int64_t, pending*> pending_;
  std::deque<std::string> writes_; // a deque: the frame being written keeps its address
  bool writing_ = false, closing_ = false;
  std::string broken_; // why the connection failed; empty while it works
};

class ws_transport final : public transport {
 public:
  ws_transport(asio::io_context& ioc, endpoint server, sampling_settings sampling, int connections)
      : ioc_(ioc), server_(std::move(server)), sampling_(sampling), connection_count_(connections) {}

  asio::awaitable<void> open() override {
    addresses_ = co_await resolve_server(server_);
    try {
      if (connection_count_ == 0) {
        // Requests connect on their own; check once that the server takes a WebSocket.
        ws_stream probe(co_await asio::this_coro::executor);
        co_await connect(probe, addresses_, server_);
        error_code ignored;
        co_await probe.async_close(websocket::close_code::normal, asio::redirect_error(use_awaitable, ignored));
        co_return;
      }
      for (int i = 0; i < connection_count_; ++i) {
        connections_.push_back(std::make_unique<shared_connection>(ioc_));
        auto& c = *connections_.back();
        co_await asio::co_spawn(c.executor(), c.open(addresses_, server_), use_awaitable);
      }
    } catch (const boost::system::system_error& e) {
      throw unreachable_error("cannot open a WebSocket to ws://" + server_.host_header() + server_.path + ": " +
                              e.code().message());
    }
  }

  asio::any_io_executor executor_for(std::size_t index) override {
    if (connections_.empty())
      return asio::make_strand(ioc_);
    return connections_[index % connections_.size()]->executor();
  }

  asio::awaitable<void> run(const bench_request& request, request_record& record, const bench_clock& clock) override {
    auto frame = ws_generate_frame(request, sampling_);
    if (!connections_.empty()) {
      auto id = static_cast<std::int64_t>(request.index);
      co_await connections_[request.index % connections_.size()]->run(std::move(frame), id, record, clock);
      co_return;
    }
    record.send_s = clock.now();
    try {
      ws_stream ws(co_await asio::this_coro::executor);
      co_await connect(ws, addresses_, server_);
      co_await ws.async_write(asio::buffer(frame), use_awaitable);
      beast::flat_buffer buffer;
      bool ended = false;
      while (!ended) {
        co_await ws.async_read(buffer, use_awaitable);
        const double t = clock.now();
        ended = apply_event(read_ws_frame(frame_text(buffer)), t, record);
        buffer.consume(buffer.size());
      }
      error_code ignored;
      co_await ws.async_close(websocket::close_code::normal, asio::redirect_error(use_awaitable, ignored));
    } catch (const boost::system::system_error& e) {
      record_failure(record, clock, "WebSocket: " + e.code().message());
    }
  }

  asio::awaitable<void> close() override {
    for (auto& c : connections_)
      co_await asio::co_spawn(c->executor(), c->close(), use_awaitable);
  }

 private:
  asio::io_context& ioc_;
  endpoint server_;
  sampling_settings sampling_;
  int connection_count_;
  tcp::resolver::results_type addresses_;
  std::vector<std::unique_ptr<shared_connection>> connections_;
};

} // namespace

std::unique_ptr<transport> make_ws_transport(asio::io_context& ioc, const endpoint& server,
                                             const sampling_settings& sampling, int connections) {
  return std::make_unique<ws_transport>(ioc, server, sampling, connections);
}

} // namespace troupe::bench
