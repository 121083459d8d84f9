// Drives a benchmark: sends each request at its arrival time, holds it back while
// max_concurrency requests are in flight, and collects every request's record.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "apps/troupe-bench/load/arrival_schedule.hpp"
#include "apps/troupe-bench/load/endpoint.hpp"
#include "apps/troupe-bench/load/request_body.hpp"
#include "apps/troupe-bench/load/request_record.hpp"
#include "apps/troupe-bench/load/workload.hpp"

namespace troupe::bench {

struct load_options {
  endpoint server;
  int ws_connections = 0; // WebSocket: 0 = a connection per request, else that many shared ones
  sampling_settings sampling;
  arrival_options arrivals;
  int max_concurrency = 0; // requests in flight at most; 0 = no limit
  int io_threads = 2;
};

struct load_outcome {
  std::vector<request_record> records; // one per request, in workload order
  double duration_s = 0;               // first send to last end
  std::size_t warmup_failures = 0;
  std::string warmup_error; // the first warm-up failure's error
};

// Sends `warmups` one by one, unmeasured, then the benchmark's `requests`. Throws
// unreachable_error (endpoint.hpp) when the server cannot be reached; requests
// that fail are recorded, not thrown.
load_outcome run_load(const load_options& options, std::span<const bench_request> requests,
                      std::span<const bench_request> warmups = {});

} // namespace troupe::bench
