// Computes the serving metrics. The definitions follow vLLM's benchmark so numbers
// from troupe-bench and `vllm bench serve` can sit in one table.
#include "apps/troupe-bench/load/serving_metrics.hpp"

#include <map>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace troupe::bench {

slo_targets parse_goodput(std::string_view text) {
  slo_targets slo;
  while (!text.empty()) {
    auto comma = text.find(',');
    auto item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    auto colon = item.find(':');
    if (colon == std::string_view::npos)
      throw std::invalid_argument("goodput: '" + std::string(item) + "' is not NAME:MILLISECONDS");
    auto name = item.substr(0, colon);
    std::string value(item.substr(colon + 1));
    double ms = 0;
    try {
      std::size_t used = 0;
      ms = std::stod(value, &used);
      if (used != value.size())
        throw std::invalid_argument("trailing text");
    } catch (const std::logic_error&) {
      throw std::invalid_argument("goodput: '" + value + "' is not a number of milliseconds");
    }
    if (!(ms > 0) || std::isinf(ms))
      throw std::invalid_argument("goodput: the " + std::string(name) + " SLO must be > 0 ms");
    std::optional<double>* target = nullptr;
    if (name == "ttft")
      target = &slo.ttft_ms;
    else if (name == "tpot")
      target = &slo.tpot_ms;
    else if (name == "e2e" || name == "e2el")
      target = &slo.e2e_ms;
    else
      throw std::invalid_argument("goodput: unknown metric '" + std::string(name) + "' (ttft, tpot or e2e)");
    if (*target)
      throw std::invalid_argument("goodput: " + std::string(name) + " is given twice");
    *target = ms;
  }
  return slo;
}

double percentile(std::span<const double> values, double p) {
  if (values.empty())
    return 0.0;
  std::vector<double> v(values.begin(), values.end());
  std::sort(v.begin(), v.end());
  double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  auto lo = static_cast<std::size_t>(std::floor(rank));
  auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (rank - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

latency_stats summarize_seconds(std::span<const double> seconds) {
  latency_stats s;
  s.count = seconds.size();
  if (seconds.empty())
    return s;
  double n = static_cast<double>(seconds.size());
  double mean = std::accumulate(seconds.begin(), seconds.end(), 0.0) / n;
  double square_sum = 0;
  for (double x : seconds)
    square_sum += (x - mean) * (x - mean);
  s.mean_ms = mean * 1e3;
  s.std_ms = std::sqrt(square_sum / n) * 1e3; // population std, as numpy.std
  s.median_ms = percentile(seconds, 50) * 1e3;
  s.p90_ms = percentile(seconds, 90) * 1e3;
  s.p99_ms = percentile(seconds, 99) * 1e3;
  return s;
}

double ttft_s(const request_record& r) {
  return (r.chunk_s.empty() ? r.end_s : r.chunk_s.front()) - r.send_s;
}

double e2e_s(const request_record& r) {
  return r.end_s - r.send_s;
}

std::optional<double> tpot_s(const request_record& r) {
  if (r.output_tokens <= 1)
    return std::nullopt;
  return (e2e_s(r) - ttft_s(r)) / (r.output_tokens - 1);
}

std::vector<double> itls_s(const request_record& r) {
  std::vector<double> gaps;
  for (std::size_t i = 1; i < r.chunk_s.size(); ++i)
    gaps.push_back(r.chunk_s[i] - r.chunk_s[i - 1]);
  return gaps;
}

serving_metrics compute_serving_metrics(std::span<const request_record> records, double duration_s,
                                        const slo_targets& slo) {
  serving_metrics m;
  m.duration_s = duration_s;
  std::vector<double> ttfts, tpots, itls, e2es;
  std::map<int, std::vector<double>> ttfts_by_priority;
  for (const auto& r : records) {
    if (!r.success) {
      ++m.failed;
      continue;
    }
    ++m.completed;
    m.total_input_tokens += r.prompt_tokens > 0 ? r.prompt_tokens : r.expected_prompt_tokens;
    m.total_output_tokens += r.output_tokens;
    double ttft = ttft_s(r), e2e = e2e_s(r);
    auto tpot = tpot_s(r);
    ttfts.push_back(ttft);
    ttfts_by_priority[r.priority].push_back(ttft);
    e2es.push_back(e2e);
    if (tpot)
      tpots.push_back(*tpot);
    auto gaps = itls_s(r);
    itls.insert(itls.end(), gaps.begin(), gaps.end());
    bool good = (!slo.ttft_ms || ttft * 1e3 <= *slo.ttft_ms) &&
                (!slo.tpot_ms || tpot.value_or(0.0) * 1e3 <= *slo.tpot_ms) && (!slo.e2e_ms || e2e * 1e3 <= *slo.e2e_ms);
    if (good && slo.any())
      ++m.good_requests;
  }
  if (duration_s > 0) {
    m.request_throughput = static_cast<double>(m.completed) / duration_s;
    m.output_throughput = static_cast<double>(m.total_output_tokens) / duration_s;
    m.total_token_throughput = static_cast<double>(m.total_input_tokens + m.total_output_tokens) / duration_s;
    if (slo.any())
      m.request_goodput = static_cast<double>(m.good_requests) / duration_s;
  } else if (slo.any()) {
    m.request_goodput = 0.0;
  }
  m.ttft = summarize_seconds(ttfts);
  m.tpot = summarize_seconds(tpots);
  m.itl = summarize_seconds(itls);
  m.e2e = summarize_seconds(e2es);
  if (ttfts_by_priority.size() > 1)
    for (const auto& [priority, values] : ttfts_by_priority)
      m.ttft_by_priority[priority] = summarize_seconds(values);
  return m;
}

} // namespace troupe::bench
