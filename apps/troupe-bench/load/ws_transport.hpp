// Benchmark requests over the WebSocket /v1/stream protocol: each request on a
// connection of its own, or many requests multiplexed over a fixed set of connections.
#pragma once

#include <boost/asio/io_context.hpp>

#include <memory>

#include "apps/troupe-bench/load/endpoint.hpp"
#include "apps/troupe-bench/load/transport.hpp"

namespace troupe::bench {

// connections == 0: every request opens (and closes) its own connection, its set-up
// counted in its TTFT as an HTTP client's would be. connections > 0: that many
// connections are opened once, before the benchmark, and request i uses connection
// i % connections, so several requests share one stream of frames.
std::unique_ptr<transport> make_ws_transport(boost::asio::io_context& ioc, const endpoint& server,
                                             const sampling_settings& sampling, int connections);

} // namespace troupe::bench
