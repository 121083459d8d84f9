// One HTTP connection, plain or TLS, as a class whose members are written by concept:
// http_session.cpp its lifecycle, reading and writing; http_routes.cpp the routing of
// each request to its handler; http_generation.cpp a generation request and its
// streamed answer. Internal to net/; the server starts sessions through
// start_http_session (server_context.hpp).
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <caf/actor.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "net/api_error.hpp"
#include "net/engine_bridge.hpp"
#include "net/generation_reply.hpp"
#include "net/inflight_per_key.hpp"
#include "net/server_context.hpp"

namespace troupe::net {

// Stream: plain_stream or tls_stream (session_stream.hpp); both are instantiated.
template <class Stream>
class http_session : public std::enable_shared_from_this<http_session<Stream>> {
 public:
  http_session(Stream stream, std::shared_ptr<server_context> ctx)
      : stream_(std::move(stream)),
        deadline_(stream_.get_executor()),
        ctx_(std::move(ctx)),
        slot_(std::make_unique<connection_slot>(ctx_)) {}
  ~http_session();

  auto executor() { return stream_.get_executor(); }

  // Over TLS, the handshake first; then the first request.
  void start();

 private:
  using request = boost::beast::http::request<boost::beast::http::string_body>;

  // --- lifecycle (http_session.cpp) ----------------------------------------------
  void begin();

  // One timer per connection, re-armed for what the connection waits on: the TLS
  // handshake, the first byte of the next request (idle), the rest of a request
  // (slowloris), the last bytes of a closing connection. Nothing is timed while the
  // server works: the client is waiting on us then.
  enum class deadline_kind { handshake, idle, request, closing };
  void arm(std::chrono::steady_clock::duration after, deadline_kind kind);
  void disarm();
  void on_deadline(deadline_kind kind);

  // The connection stops counting against max-connections here, not when the session object goes:
  // a pending deadline would otherwise hold the session, and its slot, for up to drain_time, and a
  // churn of short connections would fill the slots with closed ones (found by the overload test).
  void close_now();

  // Ends the connection, within drain_time. Plain TCP: half-close, then drain
  // what the client still sends before closing, because closing with unread
  // bytes would reset the connection and could destroy the response (e.g. a 413
  // sent before the body was read). TLS: close_notify, which also tells the
  // client that a close-delimited body (SSE) ended whole rather than cut off;
  // OpenSSL reads on until the client's own close_notify.
  void shutdown();

  // --- reading requests (http_session.cpp) ---------------------------------------
  // Between requests: the next one's first byte must come within the idle timeout.
  void await_request();
  // The request has begun: all of it, head and body, must arrive within the request timeout.
  void start_request();
  void on_read(boost::beast::error_code ec);

  // A client that goes away while its request runs (streaming or not) is
  // noticed by a pending read that ends with an error; the request is then
  // aborted (the bridge's exit reaches the engine) and its blocks come back.
  // When the next request's bytes are here already (pipelining), nothing is
  // read until this one is answered, and a disconnect shows at the write.
  void watch_for_disconnect();
  // The read that runs while no request is being parsed: it waits for the next
  // request's first byte, watches for disconnects while the engine works, and
  // drains a closing connection.
  void probe_read();
  void on_probe(boost::beast::error_code ec);
  // The client is gone: stop generating for it and let the session go.
  void abandon();

  // --- writing answers (http_session.cpp) ----------------------------------------
  // A whole answer: written, then the exchange is over.
  void reply(std::string response);
  void reply_error(const api_error& e, bool keep_alive, int retry_after = 0);
  // The exchange is answered: wait for the next request unless the connection closes.
  void finish_exchange();
  // A response's first bytes (status line and headers): the CORS headers of
  // this request join them.
  void respond(std::string response);
  // sampled_ns: when a chunk's tokens left the executor (0: not a token chunk);
  // the server overhead is measured from then to the chunk's write completing.
  void queue_write(std::string bytes, std::int64_t sampled_ns = 0);
  void write_front();

  // Held by the server context while the engine works for this connection (the
  // bridge and engine_ask keep only weak references: an io object must not
  // outlive its io_context); server::stop() lets go of whatever is still held.
  void hold_self() { ctx_->hold(this, this->shared_from_this()); }
  // Released on the next turn of the strand: this call may come from inside a member of *this.
  void release_self();

  static std::int64_t unix_now(); // seconds: the "created" of OpenAI's answers

  // --- routing (http_routes.cpp) -------------------------------------------------
  // Hands the request to its handler (route_of), after CORS preflight and the API key.
  void route(const request& req);
  void metrics();
  void tokenize(const std::string& body);
  void detokenize(const std::string& body);

  // --- a generation and its answer (http_generation.cpp) -------------------------
  void generate(request_spec spec, reply_shape shape, bool include_usage, bool want_logprobs);
  void on_event(bridge_event ev);
  // The SSE stream's head (with this request's CORS headers) and opening events, once.
  void open_stream();
  void end_generation();
  bool streaming() const { return reply_ && reply_->streaming(); }

  Stream stream_;
  boost::asio::steady_timer deadline_;
  std::uint64_t deadline_id_ = 0;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  std::shared_ptr<server_context> ctx_;
  std::unique_ptr<connection_slot> slot_;
  caf::actor bridge_;
  bool keep_alive_ = true, close_after_ = false, writing_ = false, shutting_down_ = false, probing_ = false;
  bool awaiting_request_ = false; // the probe waits for the next request's first byte
  bool reading_request_ = false;  // the parser's read is outstanding
  bool timed_out_ = false;        // the request timeout struck: answered with 408, closing
  struct pending_write {
    std::string bytes;
    std::int64_t sampled_ns = 0;
  };
  std::deque<pending_write> writes_;
  bool authorized_ = true;         // the request carried a valid key, or none is needed
  std::optional<std::size_t> key_; // which key it carried (what server.max-inflight-per-key counts by)
  std::string origin_, cors_headers_;
  // The generation in progress on this connection.
  bool generating_ = false;
  std::optional<generation_reply> reply_;
  inflight_per_key::ticket key_ticket_; // the generation's place in its key's count
  std::optional<std::chrono::steady_clock::time_point> last_chunk_;
};

} // namespace troupe::net
