// The interface the load runner drives: something that opens connections to the
// server and runs one request to its end as an Asio coroutine, filling its record.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <cstddef>
#include <string>

#include "apps/troupe-bench/load/endpoint.hpp"
#include "apps/troupe-bench/load/request_body.hpp"
#include "apps/troupe-bench/load/request_record.hpp"
#include "apps/troupe-bench/load/workload.hpp"

namespace troupe::bench {

// Seconds since the benchmark's start on the steady clock; every record uses it.
struct bench_clock {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double now() const { return since_start(std::chrono::steady_clock::now()); }
  double since_start(std::chrono::steady_clock::time_point t) const {
    return std::chrono::duration<double>(t - start).count();
  }
};

class transport {
 public:
  virtual ~transport() = default;

  // Connects what all requests share (or checks that the server accepts a
  // connection); throws unreachable_error when it cannot.
  virtual boost::asio::awaitable<void> open() = 0;

  // The executor request `index` must run on: its connection's strand.
  virtual boost::asio::any_io_executor executor_for(std::size_t index) = 0;

  // Sends `request` and reads its stream to the end. Never throws: a failure is
  // recorded in `record` (success false, error set).
  virtual boost::asio::awaitable<void> run(const bench_request& request, request_record& record,
                                           const bench_clock& clock) = 0;

  // Closes shared connections; returns once their readers have stopped.
  virtual boost::asio::awaitable<void> close() = 0;
};

// Looks the server's address up once, so that no request times a name lookup.
// Throws unreachable_error.
boost::asio::awaitable<boost::asio::ip::tcp::resolver::results_type> resolve_server(const endpoint& server);

// Ends `record` as failed now, with `why`.
void record_failure(request_record& record, const bench_clock& clock, std::string why);

} // namespace troupe::bench
