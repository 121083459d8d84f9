// The listener: binds, accepts, and hands each connection to an HTTP session
// (which upgrades to WebSocket on /v1/stream), over TLS when the server has a
// certificate. Runs on its own io threads.
#include "net/server.hpp"

#include <boost/asio.hpp>

#include <spdlog/spdlog.h>

#include <stdexcept>
#include <thread>
#include <vector>

#include "net/server_context.hpp"

namespace troupe::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

struct server::impl {
  std::shared_ptr<server_context> ctx;
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::vector<std::thread> threads;
  bool running = false;
  caf::actor engine_watch; // monitors the engine; sets ctx->engine_up to false when it goes away

  impl(caf::actor_system& sys, engine_actor engine, model_info info, server_config cfg)
      : ctx(std::make_shared<server_context>(sys, std::move(engine), std::move(info), std::move(cfg))),
        ioc(std::max(1, ctx->cfg.io_threads)) {}

  void accept() {
    acceptor.async_accept(asio::make_strand(ioc), [this](boost::system::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open())
        return;
      if (!ec) {
        // Streams are many small writes: Nagle's algorithm would hold each token back.
        boost::system::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        if (ctx->tls)
          start_http_session(tls_stream(std::move(socket), *ctx->tls), ctx);
        else
          start_http_session(plain_stream(std::move(socket)), ctx);
      }
      accept();
    });
  }
};

server::server(caf::actor_system& sys, engine_actor engine, model_info info, server_config cfg)
    : impl_(std::make_unique<impl>(sys, std::move(engine), std::move(info), std::move(cfg))) {}

server::~server() { stop(); }

std::uint16_t server::start() {
  auto& d = *impl_;
  if (d.ctx->cfg.tls.enabled() && !d.ctx->tls)
    d.ctx->tls = make_tls_context(d.ctx->cfg.tls);
  boost::system::error_code ec;
  auto address = asio::ip::make_address(d.ctx->cfg.host, ec);
  if (ec)
    throw std::runtime_error("server.host '" + d.ctx->cfg.host + "' is not an IP address: " + ec.message());
  tcp::endpoint endpoint{address, d.ctx->cfg.port};
  d.acceptor.open(endpoint.protocol(), ec);
  if (!ec)
    d.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec)
    d.acceptor.bind(endpoint, ec);
  if (!ec)
    d.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw std::runtime_error("cannot listen on " + d.ctx->cfg.host + ":" + std::to_string(d.ctx->cfg.port) + ": " +
                             ec.message());
  d.engine_watch = d.ctx->sys.spawn([ctx = d.ctx](caf::event_based_actor* self) -> caf::behavior {
    self->monitor(ctx->engine);
    self->set_down_handler([self, ctx](caf::down_msg&) {
      ctx->engine_up = false;
      spdlog::error("server: the engine went away; requests get 503 engine_unavailable");
      self->quit();
    });
    return {[](caf::ok_atom) {}}; // nothing to do but wait for the down message (or stop's exit)
  });
  d.accept();
  d.running = true;
  for (int i = 0; i < std::max(1, d.ctx->cfg.io_threads); ++i)
    d.threads.emplace_back([&d] { d.ioc.run(); });
  return d.acceptor.local_endpoint().port();
}

void server::stop() {
  auto& d = *impl_;
  if (!d.running)
    return;
  d.running = false;
  {
    std::lock_guard lock{d.ctx->gate_mutex};
    d.ctx->gate_open = false;
  }
  // Requests still running for clients end now: their sinks go away and the engine aborts them.
  d.ctx->end_all_bridges();
  caf::anon_send_exit(d.engine_watch, caf::exit_reason::user_shutdown);
  asio::post(d.ioc, [&d] {
    boost::system::error_code ignored;
    d.acceptor.close(ignored);
  });
  d.ioc.stop();
  for (auto& t : d.threads)
    t.join();
  d.threads.clear();
  // Sessions that waited on the engine are not resumed: let go of them while their io_context still exists.
  d.ctx->release_all();
}

} // namespace troupe::net
