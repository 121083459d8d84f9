// Benchmark requests over OpenAI's POST /v1/completions with stream:true: one HTTP
// connection per request (our server ends each SSE stream by closing it).
#pragma once

#include <boost/asio/io_context.hpp>

#include <memory>

#include "apps/troupe-bench/load/endpoint.hpp"
#include "apps/troupe-bench/load/transport.hpp"

namespace troupe::bench {

std::unique_ptr<transport> make_sse_transport(boost::asio::io_context& ioc, const endpoint& server,
                                              const sampling_settings& sampling);

} // namespace troupe::bench
