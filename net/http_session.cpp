// One HTTP connection, plain or TLS: reads requests (Beast's parser, with size
// and time limits), routes them, and writes responses. Generation requests go
// to the engine through a bridge; their answer is one JSON body or an SSE
// stream. A request for /v1/stream with an Upgrade header becomes a WebSocket
// session. One read at a time is outstanding on the stream: the request being
// parsed, or the probe that waits for the next request and notices a client
// that goes away while the engine works for it.
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>

#include <array>
#include <chrono>
#include <deque>
#include <optional>

#include "net/engine_ask.hpp"
#include "net/engine_bridge.hpp"
#include "net/http_response.hpp"
#include "net/openai_requests.hpp"
#include "net/openai_responses.hpp"
#include "net/playground_config.hpp"
#include "net/server_context.hpp"
#include "net/static_assets.hpp"

namespace troupe::net {

namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

using clock = std::chrono::steady_clock;
constexpr std::size_t probe_chunk = 4096;
constexpr auto drain_time = std::chrono::seconds(2); // a closing connection's last bytes, before it is cut

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// How a generation request is answered.
enum class reply_shape { completion_json, chat_json, completion_sse, chat_sse };

template <class Stream>
class http_session : public std::enable_shared_from_this<http_session<Stream>> {
 public:
  http_session(Stream stream, std::shared_ptr<server_context> ctx)
      : stream_(std::move(stream)),
        deadline_(stream_.get_executor()),
        ctx_(std::move(ctx)),
        slot_(std::make_unique<connection_slot>(ctx_)) {}

  ~http_session() {
    if (bridge_)
      ctx_->end_bridge(bridge_);
    if (generating_)
      --ctx_->in_flight;
  }

  auto executor() { return stream_.get_executor(); }

  void start() {
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

 private:
  void begin() {
    if (ctx_->connections > ctx_->cfg.max_connections) {
      close_after_ = true;
      respond(json_response(503, openai_error_body(unavailable("too many connections")), false, 1));
      return;
    }
    await_request();
  }

  // --- deadlines ---------------------------------------------------------------
  // One timer per connection, re-armed for what the connection waits on: the TLS
  // handshake, the first byte of the next request (idle), the rest of a request
  // (slowloris), the last bytes of a closing connection. Nothing is timed while the
  // server works: the client is waiting on us then.
  enum class deadline_kind { handshake, idle, request, closing };

  void arm(std::chrono::steady_clock::duration after, deadline_kind kind) {
    deadline_.expires_after(after);
    deadline_.async_wait([self = this->shared_from_this(), id = ++deadline_id_, kind](beast::error_code ec) {
      if (!ec && id == self->deadline_id_) // a timer re-armed or disarmed since is not this one
        self->on_deadline(kind);
    });
  }
  void disarm() {
    ++deadline_id_;
    deadline_.cancel();
  }

  void on_deadline(deadline_kind kind) {
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
        reply_error(
            request_timeout("the request did not arrive in full within " +
                            std::to_string(ctx_->cfg.request_timeout.count()) + " ms (server.request-timeout-s)"),
            false);
        break;
    }
  }

  // The connection stops counting against max-connections here, not when the session object goes:
  // a pending deadline would otherwise hold the session, and its slot, for up to drain_time, and a
  // churn of short connections would fill the slots with closed ones (found by the overload test).
  void close_now() {
    beast::error_code ignored;
    beast::get_lowest_layer(stream_).socket().close(ignored);
    slot_.reset();
    disarm();
  }

  // --- reading requests --------------------------------------------------------
  // Between requests: the next one's first byte must come within the idle timeout.
  void await_request() {
    if (buffer_.size() > 0) {
      start_request(); // pipelined: its first bytes are here already
      return;
    }
    arm(ctx_->cfg.idle_timeout, deadline_kind::idle);
    awaiting_request_ = true;
    if (!probing_)
      probe_read();
  }

  // The request has begun: all of it, head and body, must arrive within the request timeout.
  void start_request() {
    awaiting_request_ = false;
    parser_.emplace();
    parser_->body_limit(ctx_->cfg.max_body_bytes);
    parser_->header_limit(static_cast<std::uint32_t>(ctx_->cfg.max_header_bytes));
    arm(ctx_->cfg.request_timeout, deadline_kind::request);
    reading_request_ = true;
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
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

  // The API needs a key when keys are configured; /health, the playground's
  // static files and (unless server.metrics-auth) /metrics do not.
  bool needs_key(const std::string& target) const {
    if (!ctx_->cfg.keys.required())
      return false;
    if (target == "/metrics")
      return ctx_->cfg.metrics_auth;
    return target.starts_with("/v1/") || target == "/tokenize" || target == "/detokenize";
  }

  void route(const http::request<http::string_body>& req) {
    const std::string target(req.target());
    const auto method = req.method();
    if (method == http::verb::options && ctx_->cfg.cors.enabled()) {
      respond(ctx_->cfg.cors.preflight_response(origin_, keep_alive_));
      finish_exchange();
      return;
    }
    if (!authorized_ && needs_key(target)) {
      reply_error(unauthorized(req[http::field::authorization].empty()
                                   ? "an API key is required: send 'Authorization: Bearer <key>'"
                                   : "the API key is not valid"),
                  keep_alive_);
      return;
    }
    if (method == http::verb::get && target == "/health") {
      respond(json_response(200, R"({"status":"ok"})", keep_alive_));
      finish_exchange();
    } else if (method == http::verb::get && target == "/v1/models") {
      respond(json_response(200, models_list(ctx_->info.name, unix_now(), ctx_->info.max_model_len), keep_alive_));
      finish_exchange();
    } else if (method == http::verb::get && target == "/metrics") {
      hold_self();
      ask_engine<engine_stats, http_session>(
          ctx_, this->weak_from_this(),
          [](http_session& s, engine_stats* stats, const std::string& error) {
            s.release_self();
            if (!stats) {
              s.reply_error(unavailable("the engine did not answer: " + error), s.keep_alive_);
              return;
            }
            s.respond(text_response(200, "text/plain; version=0.0.4", s.ctx_->metrics.render(*stats, s.ctx_->info.name),
                                    s.keep_alive_));
            s.finish_exchange();
          },
          stats_atom::value);
    } else if (method == http::verb::post && target == "/tokenize") {
      tokenize(req.body());
    } else if (method == http::verb::post && target == "/detokenize") {
      detokenize(req.body());
    } else if (method == http::verb::post && target == "/v1/completions") {
      auto parsed = parse_completion_request(req.body(), ctx_->cfg.limits);
      if (auto* err = std::get_if<api_error>(&parsed)) {
        reply_error(*err, keep_alive_);
        return;
      }
      auto& r = std::get<completion_request>(parsed);
      include_usage_ = r.include_usage;
      want_logprobs_ = r.logprobs >= 0;
      generate(std::move(r.spec), r.stream ? reply_shape::completion_sse : reply_shape::completion_json);
    } else if (method == http::verb::post && target == "/v1/chat/completions") {
      auto parsed = parse_chat_request(req.body(), ctx_->cfg.limits);
      if (auto* err = std::get_if<api_error>(&parsed)) {
        reply_error(*err, keep_alive_);
        return;
      }
      auto& r = std::get<chat_request>(parsed);
      include_usage_ = r.include_usage;
      want_logprobs_ = r.top_logprobs >= 0;
      for (auto& [role, content] : r.messages)
        r.spec.messages.push_back({role, content});
      generate(std::move(r.spec), r.stream ? reply_shape::chat_sse : reply_shape::chat_json);
    } else if (method == http::verb::get && target == "/playground/config") {
      respond(json_response(200, playground_config(ctx_->info, ctx_->cfg.limits), keep_alive_));
      finish_exchange();
    } else if (auto asset = find_static_asset(target); asset && method == http::verb::get) {
      respond(text_response(200, asset->content_type, asset->body, keep_alive_)); // the playground page
      finish_exchange();
    } else if (target == "/health" || target == "/v1/models" || target == "/metrics" || target == "/tokenize" ||
               target == "/detokenize" || target == "/v1/completions" || target == "/v1/chat/completions") {
      api_error e{405, "invalid_request_error", "method not allowed for " + target, "", "method_not_allowed"};
      reply_error(e, keep_alive_);
    } else {
      reply_error(not_found("no route for " + target), keep_alive_);
    }
  }

  void tokenize(const std::string& body) {
    boost::system::error_code ec;
    auto json = boost::json::parse(body, ec);
    const boost::json::string* prompt = nullptr;
    if (!ec && json.is_object())
      if (auto* p = json.as_object().if_contains("prompt"))
        prompt = p->if_string();
    if (!prompt) {
      reply_error(invalid_request("expected a JSON object with a string 'prompt'", "prompt"), keep_alive_);
      return;
    }
    bool add_special = true;
    if (auto* a = json.as_object().if_contains("add_special_tokens"); a && a->is_bool())
      add_special = a->as_bool();
    hold_self();
    ask_engine<std::vector<token_id>, http_session>(
        ctx_, this->weak_from_this(),
        [](http_session& s, std::vector<token_id>* ids, const std::string& error) {
          s.release_self();
          if (!ids) {
            s.reply_error(invalid_request(error, "prompt"), s.keep_alive_);
            return;
          }
          boost::json::object out;
          out["tokens"] = boost::json::value_from(*ids);
          out["count"] = ids->size();
          out["max_model_len"] = s.ctx_->info.max_model_len;
          s.respond(json_response(200, boost::json::serialize(out), s.keep_alive_));
          s.finish_exchange();
        },
        tokenize_atom::value, std::string(prompt->c_str()), add_special);
  }

  void detokenize(const std::string& body) {
    boost::system::error_code ec;
    auto json = boost::json::parse(body, ec);
    std::vector<token_id> ids;
    bool ok = !ec && json.is_object();
    const boost::json::array* tokens = nullptr;
    if (ok)
      if (auto* t = json.as_object().if_contains("tokens"))
        tokens = t->if_array();
    ok = tokens != nullptr;
    if (ok)
      for (const auto& v : *tokens) {
        if (!v.is_int64()) {
          ok = false;
          break;
        }
        ids.push_back(static_cast<token_id>(v.as_int64()));
      }
    if (!ok) {
      reply_error(invalid_request("expected a JSON object with an integer array 'tokens'", "tokens"), keep_alive_);
      return;
    }
    for (auto id : ids)
      if (id < 0 || id >= ctx_->info.vocab_size) {
        reply_error(invalid_request("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                                        std::to_string(ctx_->info.vocab_size - 1) + ")",
                                    "tokens"),
                    keep_alive_);
        return;
      }
    hold_self();
    ask_engine<std::string, http_session>(
        ctx_, this->weak_from_this(),
        [](http_session& s, std::string* text, const std::string& error) {
          s.release_self();
          if (!text) {
            s.reply_error(invalid_request(error, "tokens"), s.keep_alive_);
            return;
          }
          boost::json::object out;
          out["prompt"] = *text;
          s.respond(json_response(200, boost::json::serialize(out), s.keep_alive_));
          s.finish_exchange();
        },
        detok_atom::value, std::move(ids));
  }

  void generate(request_spec spec, reply_shape shape) {
    if (ctx_->in_flight >= ctx_->cfg.queue_depth) {
      reply_error(too_many_requests("the server has " + std::to_string(ctx_->cfg.queue_depth) +
                                    " requests in flight; try again shortly"),
                  keep_alive_, 1);
      return;
    }
    auto ticket = ctx_->key_in_flight.try_acquire(key_);
    if (!ticket) {
      reply_error(too_many_requests("this API key already has " + std::to_string(ctx_->key_in_flight.limit()) +
                                    " requests in flight (server.max-inflight-per-key); try again when one ends"),
                  keep_alive_, 1);
      return;
    }
    key_ticket_ = std::move(*ticket);
    ++ctx_->in_flight;
    generating_ = true;
    hold_self();
    shape_ = shape;
    text_.clear();
    logprobs_.clear();
    text_offset_ = 0;
    sse_started_ = false;
    response_id_ = (shape == reply_shape::chat_json || shape == reply_shape::chat_sse ? "chatcmpl-" : "cmpl-") +
                   std::to_string(ctx_->next_response_id++);
    created_ = unix_now();
    last_chunk_.reset();
    if (!bridge_) {
      bridge_ =
          spawn_bridge(ctx_->sys, ctx_->engine,
                       make_push<http_session>(ctx_, this->weak_from_this(),
                                               [](http_session& s, bridge_event ev) { s.on_event(std::move(ev)); }));
      ctx_->register_bridge(bridge_);
    }
    caf::anon_send(bridge_, bridge_generate_atom::value, std::string("http"), std::move(spec));
    watch_for_disconnect();
  }

  // A client that goes away while its request runs (streaming or not) is
  // noticed by a pending read that ends with an error; the request is then
  // aborted (the bridge's exit reaches the engine) and its blocks come back.
  // When the next request's bytes are here already (pipelining), nothing is
  // read until this one is answered, and a disconnect shows at the write.
  void watch_for_disconnect() {
    if (!probing_ && buffer_.size() == 0)
      probe_read();
  }

  // The read that runs while no request is being parsed: it waits for the next
  // request's first byte, watches for disconnects while the engine works, and
  // drains a closing connection.
  void probe_read() {
    probing_ = true;
    stream_.async_read_some(buffer_.prepare(probe_chunk),
                            [self = this->shared_from_this()](beast::error_code ec, std::size_t n) {
                              self->probing_ = false;
                              if (!ec)
                                self->buffer_.commit(n);
                              self->on_probe(ec);
                            });
  }

  void on_probe(beast::error_code ec) {
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

  // The client is gone: stop generating for it and let the session go.
  void abandon() {
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

  bool streaming() const { return shape_ == reply_shape::completion_sse || shape_ == reply_shape::chat_sse; }
  bool chat() const { return shape_ == reply_shape::chat_json || shape_ == reply_shape::chat_sse; }

  void start_sse() {
    if (sse_started_)
      return;
    sse_started_ = true;
    // Close-delimited body: the stream ends with [DONE] and the connection closes.
    respond(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n");
    if (chat())
      queue_write(sse_event(
          chat_chunk(response_id_, created_, ctx_->info.name, "assistant", "", std::nullopt, include_usage_)));
  }

  // The "logprobs" of a response or chunk for the tokens collected so far (then cleared).
  boost::json::value take_logprobs() {
    if (!want_logprobs_)
      return nullptr;
    boost::json::value out = chat() ? boost::json::value(chat_logprobs(logprobs_))
                                    : boost::json::value(completion_logprobs(logprobs_, text_offset_));
    logprobs_.clear();
    return out;
  }

  void on_event(bridge_event ev) {
    const auto now = clock::now();
    switch (ev.what) {
      case bridge_event::kind::delta: {
        // Echo: the prompt leads the text, its logprobs lead the list (OpenAI's order).
        std::string text = std::move(ev.prompt_text) + ev.text;
        if (want_logprobs_) {
          logprobs_.insert(logprobs_.end(), ev.prompt_logprobs.begin(), ev.prompt_logprobs.end());
          logprobs_.insert(logprobs_.end(), ev.logprobs.begin(), ev.logprobs.end());
        }
        if (!streaming()) {
          text_ += text;
          return;
        }
        // Tokens without text yet (half a character) wait, logprobs and all, for the next chunk.
        if (text.empty())
          return;
        if (last_chunk_)
          ctx_->metrics.observe_inter_token(std::chrono::duration<double>(now - *last_chunk_).count());
        last_chunk_ = now;
        start_sse();
        queue_write(sse_event(chat() ? chat_chunk(response_id_, created_, ctx_->info.name, std::nullopt, text,
                                                  std::nullopt, include_usage_, take_logprobs())
                                     : completion_chunk(response_id_, created_, ctx_->info.name, text, std::nullopt,
                                                        include_usage_, take_logprobs())),
                    ev.sampled_ns);
        break;
      }
      case bridge_event::kind::finished: {
        end_generation();
        ctx_->metrics.observe_finished(ev.done);
        const std::string_view reason = ev.done.reason;
        if (streaming()) {
          start_sse();
          // Tokens that never became text (a stop token) still report their logprobs here.
          auto pending = logprobs_.empty() ? boost::json::value(nullptr) : take_logprobs();
          queue_write(sse_event(chat() ? chat_chunk(response_id_, created_, ctx_->info.name, std::nullopt, std::nullopt,
                                                    reason, include_usage_, std::move(pending))
                                       : completion_chunk(response_id_, created_, ctx_->info.name, "", reason,
                                                          include_usage_, std::move(pending))));
          if (include_usage_)
            queue_write(sse_event(usage_chunk(chat() ? endpoint::chat : endpoint::completions, response_id_, created_,
                                              ctx_->info.name, ev.done.usage)));
          queue_write(sse_done());
          close_after_ = true;
        } else {
          auto body = chat() ? chat_response(response_id_, created_, ctx_->info.name, text_, reason, ev.done.usage,
                                             take_logprobs())
                             : completion_response(response_id_, created_, ctx_->info.name, text_, reason,
                                                   ev.done.usage, take_logprobs());
          respond(json_response(200, body, keep_alive_));
          finish_exchange();
        }
        break;
      }
      case bridge_event::kind::failed: {
        end_generation();
        ctx_->metrics.observe_failed(ev.error.code);
        auto err = error_for(ev.error);
        if (sse_started_) {
          // Headers are out: the error travels in the stream, as vLLM does.
          queue_write(sse_event(openai_error_body(err)));
          queue_write(sse_done());
          close_after_ = true;
        } else {
          // A streaming request has a probe read pending: close rather than read the next request beside it.
          reply_error(err, streaming() ? false : keep_alive_);
        }
        break;
      }
    }
  }

  static api_error error_for(const troupe::failed& f) {
    if (f.code == "prompt_too_long")
      return {400, "invalid_request_error", f.message, "prompt", "context_length_exceeded"};
    if (f.code == "invalid_request" || f.code == "duplicate_id")
      return {400, "invalid_request_error", f.message, "", f.code};
    // step_failed, tokenizer_error (a prompt the tokenizer refuses is invalid_request), engine_error
    return {500, "server_error", f.message, "", f.code};
  }

  void end_generation() {
    if (generating_) {
      generating_ = false;
      --ctx_->in_flight;
    }
    key_ticket_.reset();
    release_self();
  }

  // Held by the server context while the engine works for this connection (the
  // bridge and engine_ask keep only weak references: an io object must not
  // outlive its io_context); server::stop() lets go of whatever is still held.
  void hold_self() { ctx_->hold(this, this->shared_from_this()); }
  // Released on the next turn of the strand: this call may come from inside a member of *this.
  void release_self() {
    if (auto keep = ctx_->release(this))
      asio::post(stream_.get_executor(), [keep] {});
  }

  void reply_error(const api_error& e, bool keep_alive, int retry_after = 0) {
    if (!keep_alive)
      close_after_ = true;
    respond(json_response(e.status, openai_error_body(e), keep_alive, retry_after));
    finish_exchange();
  }

  // The exchange is answered: wait for the next request unless the connection closes.
  void finish_exchange() {
    if (!keep_alive_)
      close_after_ = true;
    if (close_after_)
      return;
    await_request();
  }

  // A response's first bytes (status line and headers): the CORS headers of
  // this request join them.
  void respond(std::string response) {
    if (!cors_headers_.empty()) {
      auto eol = response.find("\r\n");
      if (eol != std::string::npos)
        response.insert(eol + 2, cors_headers_);
    }
    queue_write(std::move(response));
  }

  // sampled_ns: when a chunk's tokens left the executor (0: not a token chunk);
  // the server overhead is measured from then to the chunk's write completing.
  void queue_write(std::string bytes, std::int64_t sampled_ns = 0) {
    writes_.push_back({std::move(bytes), sampled_ns});
    if (!writing_)
      write_front();
  }

  void write_front() {
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

  // Ends the connection, within drain_time. Plain TCP: half-close, then drain
  // what the client still sends before closing, because closing with unread
  // bytes would reset the connection and could destroy the response (e.g. a 413
  // sent before the body was read). TLS: close_notify, which also tells the
  // client that a close-delimited body (SSE) ended whole rather than cut off;
  // OpenSSL reads on until the client's own close_notify.
  void shutdown() {
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

  Stream stream_;
  asio::steady_timer deadline_;
  std::uint64_t deadline_id_ = 0;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
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
  // The generation in progress on this connection.
  bool generating_ = false, sse_started_ = false, include_usage_ = false, want_logprobs_ = false;
  bool authorized_ = true;              // the request carried a valid key, or none is needed
  std::optional<std::size_t> key_;      // which key it carried (what server.max-inflight-per-key counts by)
  inflight_per_key::ticket key_ticket_; // the generation's place in its key's count
  std::string origin_, cors_headers_;
  std::vector<token_logprob> logprobs_; // not yet sent (streaming) or the whole answer's
  std::size_t text_offset_ = 0;         // completions' text_offset of the next token
  reply_shape shape_ = reply_shape::completion_json;
  std::string response_id_, text_;
  std::int64_t created_ = 0;
  std::optional<clock::time_point> last_chunk_;
};

} // namespace

void start_http_session(plain_stream stream, std::shared_ptr<server_context> ctx) {
  std::make_shared<http_session<plain_stream>>(std::move(stream), std::move(ctx))->start();
}

void start_http_session(tls_stream stream, std::shared_ptr<server_context> ctx) {
  std::make_shared<http_session<tls_stream>>(std::move(stream), std::move(ctx))->start();
}

} // namespace troupe::net
