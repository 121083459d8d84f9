// Serving metrics as `vllm bench serve` defines them, from the client's request records:
// TTFT, TPOT, ITL and E2E latency summaries, throughput, goodput against SLOs, failures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "apps/troupe-bench/load/request_record.hpp"

namespace troupe::bench {

// Per-request limits in milliseconds for goodput; an unset one is not checked.
struct slo_targets {
  std::optional<double> ttft_ms, tpot_ms, e2e_ms;
  bool any() const { return ttft_ms || tpot_ms || e2e_ms; }
};

// "ttft:200,tpot:50,e2e:1000" (vLLM's "e2el" is accepted for e2e). Throws
// std::invalid_argument on an unknown name, a repeated one or a value not > 0.
slo_targets parse_goodput(std::string_view text);

// numpy.percentile's default (linear interpolation between the closest ranks):
// p in [0, 100]; 0 for no values, as vLLM reports an empty metric.
double percentile(std::span<const double> values, double p);

// One latency metric over all its samples, in milliseconds; zeros when there are none.
struct latency_stats {
  std::size_t count = 0;
  double mean_ms = 0, median_ms = 0, std_ms = 0, p90_ms = 0, p99_ms = 0;
};
latency_stats summarize_seconds(std::span<const double> seconds);

// One request's metrics in seconds. TTFT: first content chunk - send (the end of the
// stream when no chunk came); E2E: end - send; TPOT: (E2E - TTFT) / (output tokens - 1),
// only for more than one output token; ITL: every gap between consecutive chunks.
double ttft_s(const request_record& r);
double e2e_s(const request_record& r);
std::optional<double> tpot_s(const request_record& r);
std::vector<double> itls_s(const request_record& r);

struct serving_metrics {
  std::size_t completed = 0, failed = 0;
  std::int64_t total_input_tokens = 0, total_output_tokens = 0; // completed requests only
  double duration_s = 0;
  double request_throughput = 0;         // completed requests / s
  double output_throughput = 0;          // output tokens / s
  double total_token_throughput = 0;     // (input + output tokens) / s
  std::optional<double> request_goodput; // requests / s meeting every SLO; set when SLOs are given
  std::size_t good_requests = 0;
  latency_stats ttft, tpot, itl, e2e;
  // TTFT of completed requests per priority, when they came with more than one priority
  // (a priority scheduler's promise is about the urgent ones' latency).
  std::map<int, latency_stats> ttft_by_priority;
};

// Failed requests count only in `failed`. For goodput a request with at most one
// output token has TPOT 0, as in vLLM. duration_s: the benchmark's wall time.
serving_metrics compute_serving_metrics(std::span<const request_record> records, double duration_s,
                                        const slo_targets& slo = {});

} // namespace troupe::bench
