// What both transports share: the address lookup and how a failed request is recorded.
#include "apps/troupe-bench/load/transport.hpp"

#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace troupe::bench {

boost::asio::awaitable<boost::asio::ip::tcp::resolver::results_type> resolve_server(const endpoint& server) {
  boost::asio::ip::tcp::resolver resolver(co_await boost::asio::this_coro::executor);
  try {
    co_return co_await resolver.async_resolve(server.host, server.port, boost::asio::use_awaitable);
  } catch (const boost::system::system_error& e) {
    throw unreachable_error("cannot resolve " + server.host_header() + ": " + e.code().message());
  }
}

void record_failure(request_record& record, const bench_clock& clock, std::string why) {
  record.end_s = clock.now();
  record.success = false;
  record.error = why.empty() ? "failed" : std::move(why);
}

} // namespace troupe::bench
