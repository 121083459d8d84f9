// Formats results. The summary keeps vLLM's labels so that the two can be compared
// line by line; P90 and the standard deviation are added.
#include "apps/troupe-bench/load/bench_report.hpp"

#include <boost/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>

namespace troupe::bench {

namespace {

std::string line(const char* name, double value, int decimals = 2) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%-40s %.*f\n", name, decimals, value);
  return buf;
}

std::string rule(const std::string& title, char fill) {
  const std::size_t width = 50;
  if (title.empty())
    return std::string(width, fill) + "\n";
  std::size_t left = (width - title.size()) / 2, right = width - title.size() - left;
  return std::string(left, fill) + title + std::string(right, fill) + "\n";
}

void print_latency(std::ostream& out, const std::string& title, const std::string& name, const latency_stats& s) {
  out << rule(title, '-');
  out << line(("Mean " + name + " (ms):").c_str(), s.mean_ms);
  out << line(("Median " + name + " (ms):").c_str(), s.median_ms);
  out << line(("Std " + name + " (ms):").c_str(), s.std_ms);
  out << line(("P90 " + name + " (ms):").c_str(), s.p90_ms);
  out << line(("P99 " + name + " (ms):").c_str(), s.p99_ms);
}

void add_latency(boost::json::object& o, const std::string& name, const latency_stats& s) {
  o["mean_" + name + "_ms"] = s.mean_ms;
  o["median_" + name + "_ms"] = s.median_ms;
  o["std_" + name + "_ms"] = s.std_ms;
  o["p90_" + name + "_ms"] = s.p90_ms;
  o["p99_" + name + "_ms"] = s.p99_ms;
}

// JSON has no infinity: an unlimited rate is written as the string "inf", as vLLM does.
boost::json::value rate_value(double rate) {
  if (std::isinf(rate))
    return "inf";
  return rate;
}

std::string utc_now() {
  auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

} // namespace

void print_summary(std::ostream& out, const run_info& info, const serving_metrics& m) {
  out << rule(" Serving Benchmark Result ", '=');
  if (!info.label.empty())
    out << "Label:                                   " << info.label << "\n";
  out << "Transport:                               " << info.transport << "\n";
  out << line("Traffic request rate (req/s):", info.request_rate);
  out << line("Burstiness factor:", info.burstiness);
  if (info.max_concurrency > 0)
    out << line("Maximum request concurrency:", info.max_concurrency, 0);
  out << line("Successful requests:", static_cast<double>(m.completed), 0);
  out << line("Failed requests:", static_cast<double>(m.failed), 0);
  out << line("Benchmark duration (s):", m.duration_s);
  out << line("Total input tokens:", static_cast<double>(m.total_input_tokens), 0);
  out << line("Total generated tokens:", static_cast<double>(m.total_output_tokens), 0);
  out << line("Request throughput (req/s):", m.request_throughput);
  if (m.request_goodput)
    out << line("Request goodput (req/s):", *m.request_goodput);
  out << line("Output token throughput (tok/s):", m.output_throughput);
  out << line("Total Token throughput (tok/s):", m.total_token_throughput);
  print_latency(out, "Time to First Token", "TTFT", m.ttft);
  for (const auto& [priority, stats] : m.ttft_by_priority)
    print_latency(out, "TTFT, priority " + std::to_string(priority) + " (" + std::to_string(stats.count) + " requests)",
                  "TTFT", stats);
  print_latency(out, "Time per Output Token (excl. 1st token)", "TPOT", m.tpot);
  print_latency(out, "Inter-token Latency", "ITL", m.itl);
  print_latency(out, "End-to-end Latency", "E2EL", m.e2e);
  out << rule("", '=');
}

boost::json::object result_json(const run_info& info, const serving_metrics& m, std::span<const request_record> records,
                                boost::json::object options) {
  boost::json::object o;
  o["date"] = utc_now();
  o["label"] = info.label;
  o["backend"] = "troupe-" + info.transport;
  o["transport"] = info.transport;
  o["url"] = info.url;
  o["num_prompts"] = records.size();
  o["request_rate"] = rate_value(info.request_rate);
  o["burstiness"] = info.burstiness;
  o["max_concurrency"] = info.max_concurrency > 0 ? boost::json::value(info.max_concurrency) : nullptr;
  o["duration"] = m.duration_s;
  o["completed"] = m.completed;
  o["failed"] = m.failed;
  o["total_input_tokens"] = m.total_input_tokens;
  o["total_output_tokens"] = m.total_output_tokens;
  o["request_throughput"] = m.request_throughput;
  o["request_goodput"] = m.request_goodput ? boost::json::value(*m.request_goodput) : nullptr;
  o["output_throughput"] = m.output_throughput;
  o["total_token_throughput"] = m.total_token_throughput;
  add_latency(o, "ttft", m.ttft);
  add_latency(o, "tpot", m.tpot);
  add_latency(o, "itl", m.itl);
  add_latency(o, "e2el", m.e2e);
  if (!m.ttft_by_priority.empty()) {
    boost::json::object by_priority;
    for (const auto& [priority, stats] : m.ttft_by_priority) {
      boost::json::object one;
      one["count"] = stats.count;
      add_latency(one, "ttft", stats);
      by_priority[std::to_string(priority)] = std::move(one);
    }
    o["ttft_by_priority"] = std::move(by_priority);
  }

  boost::json::array input_lens, output_lens, ttfts, itls, e2els, errors, priorities;
  for (const auto& r : records) {
    input_lens.emplace_back(r.prompt_tokens > 0 ? r.prompt_tokens : r.expected_prompt_tokens);
    output_lens.emplace_back(r.success ? r.output_tokens : 0);
    ttfts.emplace_back(r.success ? ttft_s(r) : 0.0);
    boost::json::array gaps;
    if (r.success)
      for (double g : itls_s(r))
        gaps.emplace_back(g);
    itls.emplace_back(std::move(gaps));
    e2els.emplace_back(r.success ? e2e_s(r) : 0.0);
    errors.emplace_back(r.error);
    priorities.emplace_back(r.priority);
  }
  o["input_lens"] = std::move(input_lens);
  o["output_lens"] = std::move(output_lens);
  o["ttfts"] = std::move(ttfts);
  o["itls"] = std::move(itls);
  o["e2els"] = std::move(e2els);
  o["errors"] = std::move(errors);
  o["priorities"] = std::move(priorities);
  o["options"] = std::move(options);
  return o;
}

} // namespace troupe::bench
