// One WebSocket connection on /v1/stream, over plain TCP or TLS: JSON text
// frames in (generate, cancel), delta/done/error frames out, many requests in
// flight, within per-connection and per-key bounds. One write is in flight at
// a time; frames waiting for a slow reader are counted, and past the backlog
// limit the connection is closed with a reason instead of letting the server
// buffer without bound. A peer that sends nothing, not even a pong to our
// pings, for the idle timeout is dropped.
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include <chrono>
#include <deque>
#include <map>

#include "net/engine_ask.hpp"
#include "net/engine_bridge.hpp"
#include "net/server_context.hpp"
#include "net/ws_frames.hpp"

namespace troupe::net {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace asio = boost::asio;

namespace {

using clock = std::chrono::steady_clock;

template <class Stream>
class ws_session : public std::enable_shared_from_this<ws_session<Stream>> {
 public:
  ws_session(Stream stream, std::shared_ptr<server_context> ctx, std::unique_ptr<connection_slot> slot,
             std::optional<std::size_t> key, bool authorized)
      : ws_(std::move(stream)), ctx_(std::move(ctx)), slot_(std::move(slot)), key_(key), authorized_(authorized) {}

  ~ws_session() {
    if (bridge_)
      ctx_->end_bridge(bridge_);
    ctx_->in_flight -= static_cast<int>(in_flight_.size());
  }

  auto executor() { return ws_.get_executor(); }

  void start(http::request<http::string_body> upgrade) {
    // Beast pings a silent peer at half the idle timeout and drops it at the full one: a live
    // client's pongs keep it connected however long it waits between requests.
    websocket::stream_base::timeout timeouts;
    timeouts.handshake_timeout = ctx_->cfg.request_timeout;
    timeouts.idle_timeout = ctx_->cfg.idle_timeout;
    timeouts.keep_alive_pings = true;
    ws_.set_option(timeouts);
    ws_.read_message_max(ctx_->cfg.max_ws_message_bytes);
    ws_.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& res) { res.set(http::field::server, "troupe"); }));
    ws_.async_accept(upgrade, [self = this->shared_from_this()](beast::error_code ec) {
      if (ec)
        return;
      self->bridge_ =
          spawn_bridge(self->ctx_->sys, self->ctx_->engine,
                       make_push<ws_session>(self->ctx_, std::weak_ptr<ws_session>(self),
                                             [](ws_session& s, bridge_event ev) { s.on_event(std::move(ev)); }));
      self->ctx_->register_bridge(self->bridge_);
      self->read_next();
    });
  }

 private:
  void read_next() {
    ws_.async_read(buffer_,
                   [self = this->shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec == websocket::error::message_too_big) {
      close(websocket::close_code::too_big,
            "message exceeds " + std::to_string(ctx_->cfg.max_ws_message_bytes) + " bytes");
      return;
    }
    if (ec)
      return; // closed or broken: the destructor tells the bridge, which aborts what is running
    if (!ws_.got_text()) {
      buffer_.consume(buffer_.size());
      send_frame(error_frame("null", "invalid_request", "binary frames are not supported; send JSON text frames"));
      read_next();
      return;
    }
    std::string text = beast::buffers_to_string(buffer_.data());
    buffer_.consume(buffer_.size());
    handle(text);
    read_next();
  }

  void handle(const std::string& text) {
    auto parsed = parse_ws_frame(text, ctx_->cfg.limits);
    if (auto* auth = std::get_if<ws_auth>(&parsed)) {
      if (!ctx_->cfg.keys.required()) {
        authorized_ = true;
        return;
      }
      if (auto key = ctx_->cfg.keys.find(auth->key)) {
        key_ = key;
        authorized_ = true;
        return;
      }
      refuse_unauthorized("the API key is not valid");
      return;
    }
    if (!authorized_) {
      // Keys are required and none came with the upgrade: the first frame had to be an auth frame.
      refuse_unauthorized(
          "an API key is required: send {\"type\":\"auth\",\"key\":...} first, or "
          "'Authorization: Bearer <key>' with the upgrade");
      return;
    }
    if (auto* rejected = std::get_if<ws_rejected>(&parsed)) {
      send_frame(error_frame(rejected->id_json, ws_invalid_request, rejected->error.message));
      return;
    }
    if (auto* cancel = std::get_if<ws_cancel>(&parsed)) {
      if (!in_flight_.contains(cancel->id_json)) {
        send_frame(error_frame(cancel->id_json, "unknown_id", "no request with this id is in flight"));
        return;
      }
      caf::anon_send(bridge_, bridge_cancel_atom::value, cancel->id_json);
      return;
    }
    auto& gen = std::get<ws_generate>(parsed);
    if (in_flight_.contains(gen.id_json)) {
      send_frame(error_frame(gen.id_json, "duplicate_id", "a request with this id is already in flight"));
      return;
    }
    if (static_cast<int>(in_flight_.size()) >= ctx_->cfg.max_in_flight_per_connection) {
      send_frame(error_frame(gen.id_json, "too_many_requests",
                             "this connection already has " + std::to_string(in_flight_.size()) +
                                 " requests in flight (server.max-inflight-per-connection); send more when one ends"));
      return;
    }
    if (ctx_->in_flight >= ctx_->cfg.queue_depth) {
      send_frame(error_frame(gen.id_json, "overloaded", "the server's queue is full; try again shortly"));
      return;
    }
    auto ticket = ctx_->key_in_flight.try_acquire(key_);
    if (!ticket) {
      send_frame(error_frame(gen.id_json, "too_many_requests",
                             "this API key already has " + std::to_string(ctx_->key_in_flight.limit()) +
                                 " requests in flight (server.max-inflight-per-key); send more when one ends"));
      return;
    }
    in_flight_.emplace(gen.id_json, std::move(*ticket));
    ++ctx_->in_flight;
    caf::anon_send(bridge_, bridge_generate_atom::value, gen.id_json, std::move(gen.spec));
  }

  void on_event(bridge_event ev) {
    switch (ev.what) {
      case bridge_event::kind::delta: {
        auto now = clock::now();
        if (!ev.tool_calls.empty())
          ctx_->metrics.observe_tool_calls(ev.tool_calls.size());
        auto& last = last_chunk_[ev.tag];
        if (last != clock::time_point{})
          ctx_->metrics.observe_inter_token(std::chrono::duration<double>(now - last).count());
        last = now;
        send_frame(delta_frame(ev.tag, ev.text, ev.token_ids, ev.logprobs, ev.prompt_logprobs, ev.prompt_text, ev.index,
                               ev.finish_reason, ev.tool_calls, ev.tool_call_index),
                   ev.sampled_ns);
        break;
      }
      case bridge_event::kind::finished:
        ctx_->metrics.observe_finished(ev.done);
        end(ev.tag);
        send_frame(done_frame(ev.tag, ev.done));
        break;
      case bridge_event::kind::failed:
        ctx_->metrics.observe_failed(ev.error.code);
        end(ev.tag);
        send_frame(error_frame(ev.tag, ev.error.code, ev.error.message));
        break;
    }
  }

  void end(const std::string& tag) {
    if (in_flight_.erase(tag) > 0)
      --ctx_->in_flight;
    last_chunk_.erase(tag);
  }

  // sampled_ns: when the frame's tokens left the executor (0: not a token frame);
  // the server overhead is measured from then to the frame's write completing.
  void send_frame(std::string frame, std::int64_t sampled_ns = 0) {
    if (closing_)
      return;
    backlog_bytes_ += frame.size();
    if (backlog_bytes_ > ctx_->cfg.max_ws_backlog_bytes) {
      close(websocket::close_code::policy_error, "client reads too slowly: more than " +
                                                     std::to_string(ctx_->cfg.max_ws_backlog_bytes) +
                                                     " bytes of frames are waiting");
      return;
    }
    writes_.push_back({std::move(frame), sampled_ns});
    if (!writing_)
      write_front();
  }

  void write_front() {
    writing_ = true;
    ws_.text(true);
    ws_.async_write(asio::buffer(writes_.front().bytes),
                    [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                      const auto& written = self->writes_.front();
                      self->backlog_bytes_ -= std::min(self->backlog_bytes_, written.bytes.size());
                      if (!ec && written.sampled_ns != 0)
                        self->ctx_->metrics.observe_frame_written(written.sampled_ns);
                      self->writes_.pop_front();
                      if (ec) {
                        self->writing_ = false;
                        self->writes_.clear();
                        return;
                      }
                      if (!self->writes_.empty() && !self->closing_)
                        self->write_front();
                      else
                        self->writing_ = false;
                    });
  }

  void refuse_unauthorized(const std::string& why) {
    send_frame(error_frame("null", "unauthorized", why));
    close(websocket::close_code::policy_error, "unauthorized");
  }

  void close(websocket::close_code code, std::string reason) {
    if (closing_)
      return;
    closing_ = true;
    // The frame being written must outlive its async_write; drop only the queued ones.
    writes_.erase(writes_.begin() + (writing_ ? 1 : 0), writes_.end());
    // Beast allows one close alongside the write in flight: the client gets the reason.
    auto self = this->shared_from_this();
    ws_.async_close(websocket::close_reason(code, reason), [self](beast::error_code) {});
  }

  websocket::stream<Stream> ws_;
  beast::flat_buffer buffer_;
  std::shared_ptr<server_context> ctx_;
  std::unique_ptr<connection_slot> slot_; // taken over from the HTTP session that upgraded
  caf::actor bridge_;
  std::optional<std::size_t> key_;                            // the API key shown, if any
  std::map<std::string, inflight_per_key::ticket> in_flight_; // by id, each with its place in its key's count
  std::map<std::string, clock::time_point> last_chunk_;
  struct pending_frame {
    std::string bytes;
    std::int64_t sampled_ns = 0;
  };
  std::deque<pending_frame> writes_;
  std::size_t backlog_bytes_ = 0;
  bool writing_ = false, closing_ = false;
  bool authorized_ = true; // a valid key came with the upgrade or an auth frame, or none is needed
};

} // namespace

template <class Stream>
void start_ws_session(Stream stream, http::request<http::string_body> upgrade, std::shared_ptr<server_context> ctx,
                      std::unique_ptr<connection_slot> slot, std::optional<std::size_t> key, bool authorized) {
  std::make_shared<ws_session<Stream>>(std::move(stream), std::move(ctx), std::move(slot), key, authorized)
      ->start(std::move(upgrade));
}

template void start_ws_session(plain_stream, http::request<http::string_body>, std::shared_ptr<server_context>,
                               std::unique_ptr<connection_slot>, std::optional<std::size_t>, bool);
template void start_ws_session(tls_stream, http::request<http::string_body>, std::shared_ptr<server_context>,
                               std::unique_ptr<connection_slot>, std::optional<std::size_t>, bool);

} // namespace troupe::net
