// One HTTP connection's lifecycle (TLS handshake, deadlines, shutdown), the reading of
// its requests (Beast's parser, with size and time limits) and the writing of its
// answers. One read at a time is outstanding on the stream: the request being parsed,
// or the probe that waits for the next request and notices a client that goes away
// while the engine works for it. A request for /v1/stream with an Upgrade header
// becomes a WebSocket session; any other goes to route (http_routes.cpp).
#include "net/http_session.hpp"

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include "net/http_response.hpp"

namespace troupe::net {

namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {
constexpr std::size_t probe_chunk = 4096;
constexpr auto drain_time = std::chrono::seconds(2); // a closing connection's last bytes, before it is cut
} // namespace

template <class Stream>
std::int64_t http_session<Stream>::unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

template <class Stream>
http_session<Stream>::~http_session() {
  if (bridge_)
    ctx_->end_bridge(bridge_);
  if (generating_)
    --ctx_->in_flight;
}

template <class Stream>
void http_session<Stream>::start() {
  if constexpr (is_tls<Stream>) {
    // The handshake counts as part of the first request: a client that stalls in it is cut off alike.
    arm(ctx_->cfg.request_timeout, deadline_kind::handshake);
    stream_.async_handshake(asio::ssl::stream_base::server, [self = this->shared_from_this()](beast::error_code ec) {
      self->disarm();
      if (ec) {
        // Not TLS (plain HTTP to a TLS port) or no common protocol: there is no channel to answer on.
        self->close_now();
        return;
      }
      self->begin();
    });
  } else {
    begin();
  }
}

template <class Stream>
void http_session<Stream>::begin() {
  if (ctx_->connections > ctx_->cfg.max_connections) {
    close_after_ = true;
    respond(json_response(503, openai_error_body(unavailable("too many connections")), false, 1));
    return;
  }
  await_request();
}

template <class Stream>
void http_session<Stream>::arm(std::chrono::steady_clock::duration after, deadline_kind kind) {
  deadline_.expires_after(after);
  deadline_.async_wait([self = this->shared_from_this(), id = ++deadline_id_, kind](beast::error_code ec) {
    if (!ec && id == self->deadline_id_) // a timer re-armed or disarmed since is not this one
      self->on_deadline(kind);
  });
}

template <class Stream>
void http_session<Stream>::disarm() {
  ++deadline_id_;
  deadline_.cancel();
}

template <class Stream>
void http_session<Stream>::on_deadline(deadline_kind kind) {
  switch (kind) {
    case deadline_kind::handshake:
    case deadline_kind::closing:
      close_now();
      break;
    case deadline_kind::idle:
      // A keep-alive connection may end whenever no request is under way: no answer is owed.
      close_after_ = true;
      shutdown();
      break;
    case deadline_kind::request:
      // The read still pending drains what the client sends until the connection closes.
      timed_out_ = true;
      reply_error(request_timeout("the request did not arrive in full within " +
                                  std::to_string(ctx_->cfg.request_timeout.count()) + " ms (server.request-timeout-s)"),
                  false);
      break;
  }
}

template <class Stream>
void http_session<Stream>::close_now() {
  beast::error_code ignored;
  beast::get_lowest_layer(stream_).socket().close(ignored);
  slot_.reset();
  disarm();
}

template <class Stream>
void http_session<Stream>::await_request() {
  if (buffer_.size() > 0) {
    start_request(); // pipelined: its first bytes are here already
    return;
  }
  arm(ctx_->cfg.idle_timeout, deadline_kind::idle);
  awaiting_request_ = true;
  if (!probing_)
    probe_read();
}

template <class Stream>
void http_session<Stream>::start_request() {
  awaiting_request_ = false;
  parser_.emplace();
  parser_->body_limit(ctx_->cfg.max_body_bytes);
  parser_->header_limit(static_cast<std::uint32_t>(ctx_->cfg.max_header_bytes));
  arm(ctx_->cfg.request_timeout, deadline_kind::request);
  reading_request_ = true;
  http::async_read(stream_, buffer_, *parser_,
                   [self = this->shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
}

template <class Stream>
void http_session<Stream>::on_read(beast::error_code ec) {
  reading_request_ = false;
  if (timed_out_ || shutting_down_) {
    // Answered already (408): what still came is drained, not served.
    if (shutting_down_ && ec)
      close_now();
    else if (shutting_down_)
      probe_read();
    return;
  }
  disarm();
  if (ec == http::error::end_of_stream || ec == asio::error::operation_aborted ||
      ec == asio::ssl::error::stream_truncated) {
    // A client that half-closes after its request still gets the reply being written.
    close_after_ = true;
    if (!writing_)
      shutdown();
    return;
  }
  if (ec == http::error::body_limit) {
    reply_error(payload_too_large("the request body exceeds " + std::to_string(ctx_->cfg.max_body_bytes) + " bytes"),
                false);
    return;
  }
  if (ec == http::error::header_limit) {
    close_after_ = true;
    respond(json_response(431,
                          openai_error_body(headers_too_large("the request line and headers exceed " +
                                                              std::to_string(ctx_->cfg.max_header_bytes) + " bytes")),
                          false));
    return;
  }
  if (ec) {
    close_after_ = true;
    respond(
        json_response(400, openai_error_body(invalid_request("malformed HTTP request: " + ec.message(), "")), false));
    return;
  }
  auto req = parser_->release();
  keep_alive_ = req.keep_alive();
  const auto& cfg = ctx_->cfg;
  key_ = cfg.keys.find_authorization(req[http::field::authorization]);
  authorized_ = !cfg.keys.required() || key_.has_value();
  origin_ = std::string(req[http::field::origin]);
  cors_headers_ = cfg.cors.response_headers(origin_);
  if (beast::websocket::is_upgrade(req)) {
    if (req.target() == "/v1/stream") {
      // The connection keeps its slot: it is the same connection, now speaking WebSocket. Without a key
      // in the upgrade (a browser cannot set headers there) its first frame must be an auth frame.
      start_ws_session(std::move(stream_), std::move(req), ctx_, std::move(slot_), key_, authorized_);
      return;
    }
    reply_error(not_found("no WebSocket endpoint at " + std::string(req.target())), false);
    return;
  }
  route(req);
}

template <class Stream>
void http_session<Stream>::watch_for_disconnect() {
  if (!probing_ && buffer_.size() == 0)
    probe_read();
}

template <class Stream>
void http_session<Stream>::probe_read() {
  probing_ = true;
  stream_.async_read_some(buffer_.prepare(probe_chunk),
                          [self = this->shared_from_this()](beast::error_code ec, std::size_t n) {
                            self->probing_ = false;
                            if (!ec)
                              self->buffer_.commit(n);
                            self->on_probe(ec);
                          });
}

template <class Stream>
void http_session<Stream>::on_probe(beast::error_code ec) {
  if (shutting_down_) {
    if (ec) {
      close_now();
      return;
    }
    buffer_.consume(buffer_.size()); // drained: nothing more is read as a request
    probe_read();
    return;
  }
  if (ec) {
    if (generating_) {
      abandon(); // the client went away while the engine worked for it
      return;
    }
    // Closed between requests, or after the last one.
    close_after_ = true;
    if (!writing_)
      shutdown();
    return;
  }
  if (streaming()) {
    buffer_.consume(buffer_.size()); // an SSE stream ends the connection: nothing more is a request
    probe_read();
  } else if (awaiting_request_) {
    start_request();
  }
  // Otherwise the bytes are a pipelined request's, kept for the parser until this exchange is answered.
}

template <class Stream>
void http_session<Stream>::abandon() {
  if (bridge_) {
    ctx_->end_bridge(bridge_);
    bridge_ = caf::actor{};
  }
  end_generation();
  // The frame being written must outlive its async_write; drop only the queued ones.
  writes_.erase(writes_.begin() + (writing_ ? 1 : 0), writes_.end());
  close_after_ = true;
  shutdown();
}

template <class Stream>
void http_session<Stream>::release_self() {
  if (auto keep = ctx_->release(this))
    asio::post(stream_.get_executor(), [keep] {});
}

template <class Stream>
void http_session<Stream>::reply(std::string response) {
  respond(std::move(response));
  finish_exchange();
}

template <class Stream>
void http_session<Stream>::reply_error(const api_error& e, bool keep_alive, int retry_after) {
  if (!keep_alive)
    close_after_ = true;
  reply(json_response(e.status, openai_error_body(e), keep_alive, retry_after));
}

template <class Stream>
void http_session<Stream>::finish_exchange() {
  if (!keep_alive_)
    close_after_ = true;
  if (close_after_)
    return;
  await_request();
}

template <class Stream>
void http_session<Stream>::respond(std::string response) {
  if (!cors_headers_.empty()) {
    auto eol = response.find("\r\n");
    if (eol != std::string::npos)
      response.insert(eol + 2, cors_headers_);
  }
  queue_write(std::move(response));
}

template <class Stream>
void http_session<Stream>::queue_write(std::string bytes, std::int64_t sampled_ns) {
  writes_.push_back({std::move(bytes), sampled_ns});
  if (!writing_)
    write_front();
}

template <class Stream>
void http_session<Stream>::write_front() {
  writing_ = true;
  asio::async_write(stream_, asio::buffer(writes_.front().bytes),
                    [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                      if (!ec && self->writes_.front().sampled_ns != 0)
                        self->ctx_->metrics.observe_frame_written(self->writes_.front().sampled_ns);
                      self->writes_.pop_front();
                      if (ec) {
                        self->writing_ = false;
                        if (self->generating_)
                          self->abandon(); // the client went away: abort its request
                        else
                          self->shutdown();
                        if (!self->writing_)
                          self->writes_.clear();
                        return;
                      }
                      if (!self->writes_.empty()) {
                        self->write_front();
                        return;
                      }
                      self->writing_ = false;
                      if (self->close_after_)
                        self->shutdown();
                    });
}

template <class Stream>
void http_session<Stream>::shutdown() {
  if (shutting_down_)
    return;
  shutting_down_ = true;
  awaiting_request_ = false;
  arm(drain_time, deadline_kind::closing);
  if constexpr (is_tls<Stream>) {
    stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) { self->close_now(); });
  } else {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    if (!probing_ && !reading_request_)
      probe_read();
  }
}

// Every member defined above, for both streams (the routing and generation members are
// instantiated in their own files).
template class http_session<plain_stream>;
template class http_session<tls_stream>;

void start_http_session(plain_stream stream, std::shared_ptr<server_context> ctx) {
  std::make_shared<http_session<plain_stream>>(std::move(stream), std::move(ctx))->start();
}

void start_http_session(tls_stream stream, std::shared_ptr<server_context> ctx) {
  std::make_shared<http_session<tls_stream>>(std::move(stream), std::move(ctx))->start();
}

} // namespace troupe::net
