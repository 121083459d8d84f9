// A benchmark's results for people and for scripts: the one-screen summary in the
// layout of vLLM's "Serving Benchmark Result", and a JSON file with every field.
#pragma once

#include <boost/json/object.hpp>

#include <ostream>
#include <span>
#include <string>

#include "apps/troupe-bench/load/request_record.hpp"
#include "apps/troupe-bench/load/serving_metrics.hpp"

namespace troupe::bench {

struct run_info {
  std::string label, transport, url;
  double request_rate = 0; // inf for all at once
  double burstiness = 1;
  int max_concurrency = 0; // 0: no limit
};

void print_summary(std::ostream& out, const run_info& info, const serving_metrics& m);

// vLLM's result field names (mean_ttft_ms, p99_itl_ms, mean_e2el_ms, ...) plus
// "failed", the per-request arrays (input_lens, output_lens, ttfts, itls, e2els,
// errors, priorities; seconds as vLLM writes them) and `options` as given.
boost::json::object result_json(const run_info& info, const serving_metrics& m, std::span<const request_record> records,
                                boost::json::object options);

} // namespace troupe::bench
