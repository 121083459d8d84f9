// A generation request on an HTTP connection: admitted against the server's limits, sent
// to the engine through the connection's bridge, and answered as its events come back
// (generation_reply shapes the JSON body or the SSE chunks; this writes them).
#include <chrono>
#include <string>
#include <utility>

#include "net/engine_ask.hpp"
#include "net/http_response.hpp"
#include "net/http_session.hpp"

namespace troupe::net {

template <class Stream>
void http_session<Stream>::generate(request_spec spec, reply_shape shape, bool include_usage, bool want_logprobs) {
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
  reply_.emplace(shape, ctx_->info.name, unix_now(), ctx_->next_response_id++, spec.params.n, include_usage,
                 want_logprobs);
  last_chunk_.reset();
  if (!bridge_) {
    bridge_ = spawn_bridge(ctx_->sys, ctx_->engine,
                           make_push<http_session>(ctx_, this->weak_from_this(), [](http_session& s, bridge_event ev) {
                             s.on_event(std::move(ev));
                           }));
    ctx_->register_bridge(bridge_);
  }
  caf::anon_send(bridge_, bridge_generate_atom::value, std::string("http"), std::move(spec));
  watch_for_disconnect();
}

template <class Stream>
void http_session<Stream>::open_stream() {
  if (auto opening = reply_->open_stream()) {
    respond(std::move(opening->head));
    for (auto& e : opening->events)
      queue_write(std::move(e));
  }
}

template <class Stream>
void http_session<Stream>::on_event(bridge_event ev) {
  const auto now = std::chrono::steady_clock::now();
  switch (ev.what) {
    case bridge_event::kind::delta: {
      auto chunks =
          reply_->on_delta(ev.index, ev.prompt_text, ev.text, ev.prompt_logprobs, ev.logprobs, ev.finish_reason,
                           ev.tool_calls, ev.tool_call_index);
      if (!ev.tool_calls.empty())
        ctx_->metrics.observe_tool_calls(ev.tool_calls.size());
      if (!chunks.text && !chunks.finish)
        return;
      open_stream();
      // Only text chunks count as tokens arriving: a choice's finish chunk is not one.
      if (chunks.text) {
        if (last_chunk_)
          ctx_->metrics.observe_inter_token(std::chrono::duration<double>(now - *last_chunk_).count());
        last_chunk_ = now;
        queue_write(std::move(*chunks.text), ev.sampled_ns);
      }
      if (chunks.finish)
        queue_write(std::move(*chunks.finish));
      break;
    }
    case bridge_event::kind::finished: {
      end_generation();
      ctx_->metrics.observe_finished(ev.done);
      if (streaming()) {
        open_stream();
        for (auto& e : reply_->finish_stream(ev.done))
          queue_write(std::move(e));
        close_after_ = true;
      } else {
        reply(json_response(200, reply_->json_body(ev.done), keep_alive_));
      }
      break;
    }
    case bridge_event::kind::failed: {
      end_generation();
      ctx_->metrics.observe_failed(ev.error.code);
      auto err = api_error_for(ev.error);
      if (reply_->stream_started()) {
        for (auto& e : reply_->fail_stream(err))
          queue_write(std::move(e));
        close_after_ = true;
      } else {
        // A streaming request has a probe read pending: close rather than read the next request beside it.
        reply_error(err, streaming() ? false : keep_alive_);
      }
      break;
    }
  }
}

template <class Stream>
void http_session<Stream>::end_generation() {
  if (generating_) {
    generating_ = false;
    --ctx_->in_flight;
  }
  key_ticket_.reset();
  release_self();
}

// For both streams; the session's other members are instantiated in http_session.cpp.
template void http_session<plain_stream>::generate(request_spec spec, reply_shape shape, bool include_usage,
                                                   bool want_logprobs);
template void http_session<plain_stream>::open_stream();
template void http_session<plain_stream>::on_event(bridge_event ev);
template void http_session<plain_stream>::end_generation();
template void http_session<tls_stream>::generate(request_spec spec, reply_shape shape, bool include_usage,
                                                 bool want_logprobs);
template void http_session<tls_stream>::open_stream();
template void http_session<tls_stream>::on_event(bridge_event ev);
template void http_session<tls_stream>::end_generation();

} // namespace troupe::net
