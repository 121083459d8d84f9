// One question to the engine from an io thread, answered on the session's
// strand: a short-lived actor sends the request and posts the reply (or the
// error) back. io threads never block on the actor system. Only a weak
// reference to the session crosses into CAF (an executor copy must not outlive
// its io_context), and the server's gate stops posts once it shuts down.
#pragma once

#include <boost/asio/post.hpp>

#include <caf/all.hpp>

#include <functional>
#include <memory>
#include <string>

#include "net/engine_bridge.hpp"
#include "net/server_context.hpp"

namespace troupe::net {

template <class Reply, class Session, class... Args>
void ask_engine(const std::shared_ptr<server_context>& ctx, std::weak_ptr<Session> session,
                std::function<void(Session&, Reply*, const std::string& error)> done, Args... args) {
  ctx->sys.spawn([ctx, session, done = std::move(done), args...](caf::event_based_actor* self) {
    auto deliver = [ctx, session, done](std::shared_ptr<Reply> reply, std::string error) {
      std::lock_guard lock{ctx->gate_mutex};
      if (!ctx->gate_open)
        return;
      if (auto s = session.lock())
        boost::asio::post(s->executor(), [s, done, reply, error] { done(*s, reply.get(), error); });
    };
    self->request(ctx->engine, std::chrono::seconds(30), args...)
        .then(
            [self, deliver](Reply& r) {
              deliver(std::make_shared<Reply>(std::move(r)), {});
              self->quit();
            },
            [self, deliver](caf::error& e) {
              deliver(nullptr, to_string(e));
              self->quit();
            });
  });
}

// A push function for a bridge: events hop onto the session's strand.
template <class Session, class Handler>
std::function<void(bridge_event)> make_push(const std::shared_ptr<server_context>& ctx, std::weak_ptr<Session> session,
                                            Handler handler) {
  return [ctx, session, handler](bridge_event ev) {
    std::lock_guard lock{ctx->gate_mutex};
    if (!ctx->gate_open)
      return;
    if (auto s = session.lock())
      boost::asio::post(s->executor(), [s, handler, ev = std::move(ev)]() mutable { handler(*s, std::move(ev)); });
  };
}

} // namespace troupe::net
