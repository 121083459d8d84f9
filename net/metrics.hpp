// Serving metrics in Prometheus text format, named after vLLM's (troupe: prefix):
// latency histograms observed by the server as requests stream, gauges and
// counters taken from the engine's stats at scrape time.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "troupe/engine_stats.hpp"
#include "troupe/messages.hpp"

namespace troupe::net {

class histogram {
 public:
  explicit histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // Appends the _bucket, _sum and _count lines of `name`.
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  mutable std::mutex mutex_;
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_; // per bucket, not cumulative
  double sum_ = 0;
  std::uint64_t count_ = 0;
};

// The most recent samples of one latency (a ring), for exact quantiles: a
// histogram's buckets are too coarse to tell 50 µs from 150 µs. Rendered as a
// Prometheus summary (quantile 0.5, 0.9, 0.99, _sum and _count over all samples).
class latency_window {
 public:
  explicit latency_window(std::size_t capacity = 1 << 16);
  void observe(double value);
  // q in [0, 1] over the samples in the window; 0 when empty.
  double quantile(double q) const;
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  mutable std::mutex mutex_;
  std::vector<double> ring_;
  std::size_t capacity_, next_ = 0;
  double sum_ = 0;
  std::uint64_t count_ = 0;
};

class server_metrics {
 public:
  server_metrics();
  // One finished request: its timings and token counts.
  void observe_finished(const finished& f);
  void observe_failed(const std::string& code);
  // Tool calls parsed from replies and sent to a client.
  void observe_tool_calls(std::size_t calls);
  // Gap between two consecutive content chunks of one request, seconds.
  void observe_inter_token(double seconds);
  // Server overhead per streamed chunk: from its tokens leaving the executor (the
  // end of their step, steady_clock nanoseconds) to its frame being written to the socket, now.
  void observe_frame_written(std::int64_t sampled_steady_ns);
  const latency_window& server_overhead() const { return server_overhead_; }
  std::string render(const engine_stats& stats, const std::string& model_name) const;

 private:
  histogram ttft_, itl_, e2e_, queue_, tpot_, server_latency_;
  latency_window server_overhead_;
  mutable std::mutex mutex_;
  std::uint64_t prompt_tokens_ = 0, generation_tokens_ = 0, tool_calls_ = 0;
  std::vector<std::pair<std::string, std::uint64_t>> finished_by_reason_, failed_by_code_;
};

} // namespace troupe::net
