// Prometheus exposition: histograms with cumulative buckets, +Inf, _sum, _count.
#include "net/metrics.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <utility>

namespace troupe::net {

namespace {
std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}
void bump(std::vector<std::pair<std::string, std::uint64_t>>& counters, const std::string& key) {
  for (auto& [k, v] : counters)
    if (k == key) {
      ++v;
      return;
    }
  counters.emplace_back(key, 1);
}
const std::vector<double> latency_buckets{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
                                          0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
const std::vector<double> fine_buckets{0.00001, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1};
} // namespace

histogram::histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void histogram::observe(double value) {
  std::lock_guard lock{mutex_};
  auto i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++counts_[static_cast<std::size_t>(i)];
  sum_ += value;
  ++count_;
}

void histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  std::lock_guard lock{mutex_};
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  out += name + "_sum " + number(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
}

latency_window::latency_window(std::size_t capacity) : capacity_(std::max<std::size_t>(1, capacity)) {
  ring_.reserve(capacity_);
}

void latency_window::observe(double value) {
  std::lock_guard lock{mutex_};
  if (ring_.size() < capacity_)
    ring_.push_back(value);
  else
    ring_[next_] = value;
  next_ = (next_ + 1) % capacity_;
  sum_ += value;
  ++count_;
}

double latency_window::quantile(double q) const {
  std::vector<double> copy;
  {
    std::lock_guard lock{mutex_};
    copy = ring_;
  }
  if (copy.empty())
    return 0.0;
  // Nearest rank: the smallest sample with at least q of the samples at or below it.
  auto rank = static_cast<std::size_t>(std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(copy.size())));
  auto k = rank == 0 ? 0 : rank - 1;
  std::nth_element(copy.begin(), copy.begin() + static_cast<std::ptrdiff_t>(k), copy.end());
  return copy[k];
}

void latency_window::render(std::string& out, const std::string& name, const std::string& help) const {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " summary\n";
  for (double q : {0.5, 0.9, 0.99})
    out += name + "{quantile=\"" + number(q) + "\"} " + number(quantile(q)) + "\n";
  std::lock_guard lock{mutex_};
  out += name + "_sum " + number(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
}

server_metrics::server_metrics()
    : ttft_(latency_buckets),
      itl_(latency_buckets),
      e2e_(latency_buckets),
      queue_(latency_buckets),
      tpot_(latency_buckets),
      server_latency_(fine_buckets) {}

void server_metrics::observe_finished(const finished& f) {
  ttft_.observe(f.timings.ttft_ms / 1000.0);
  e2e_.observe(f.timings.e2e_ms / 1000.0);
  queue_.observe(f.timings.queue_ms / 1000.0);
  if (f.usage.completion_tokens > 1)
    tpot_.observe(f.timings.tpot_ms / 1000.0);
  std::lock_guard lock{mutex_};
  prompt_tokens_ += static_cast<std::uint64_t>(f.usage.prompt_tokens);
  generation_tokens_ += static_cast<std::uint64_t>(f.usage.completion_tokens);
  bump(finished_by_reason_, f.reason);
}

void server_metrics::observe_failed(const std::string& code) {
  std::lock_guard lock{mutex_};
  bump(failed_by_code_, code);
}

void server_metrics::observe_tool_calls(std::size_t calls) {
  std::lock_guard lock{mutex_};
  tool_calls_ += calls;
}

void server_metrics::observe_inter_token(double seconds) {
  itl_.observe(seconds);
}
void server_metrics::observe_frame_written(std::int64_t sampled_steady_ns) {
  using clock = std::chrono::steady_clock;
  const double seconds =
      std::chrono::duration<double>(clock::now() - clock::time_point(clock::duration(sampled_steady_ns))).count();
  server_latency_.observe(seconds);
  server_overhead_.observe(seconds);
}

namespace {
// A summary (nearest-rank quantiles, sum, count) of the engine's per-step samples in microseconds, in seconds.
void render_samples(std::string& out, const std::string& name, const std::string& help, std::vector<double> micros) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " summary\n";
  std::sort(micros.begin(), micros.end());
  for (double q : {0.5, 0.9, 0.99}) {
    double v = 0;
    if (!micros.empty()) {
      auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(micros.size())));
      v = micros[rank == 0 ? 0 : rank - 1] / 1e6;
    }
    out += name + "{quantile=\"" + number(q) + "\"} " + number(v) + "\n";
  }
  double sum = 0;
  for (double x : micros)
    sum += x;
  out += name + "_sum " + number(sum / 1e6) + "\n" + name + "_count " + std::to_string(micros.size()) + "\n";
}
} // namespace

std::string server_metrics::render(const engine_stats& s, const std::string& model_name) const {
  std::string out;
  const std::string label = "{model_name=\"" + model_name + "\"}";
  auto gauge = [&](const std::string& name, const std::string& help, double v) {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " gauge\n" + name + label + " " + number(v) + "\n";
  };
  auto counter = [&](const std::string& name, const std::string& help, double v) {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " counter\n" + name + label + " " + number(v) + "\n";
  };
  gauge("troupe:num_requests_running", "Sequences in the running batch.", s.running);
  gauge("troupe:num_requests_waiting", "Sequences waiting to be scheduled.", s.waiting);
  gauge("troupe:num_requests_swapped", "Sequences swapped out to CPU memory.", s.swapped);
  double usage = s.device_blocks_total > 0
                     ? 1.0 - static_cast<double>(s.device_blocks_free) / static_cast<double>(s.device_blocks_total)
                     : 0.0;
  gauge("troupe:kv_cache_usage_perc", "Fraction of device KV-cache blocks in use (1 = full).", usage);
  gauge("troupe:kv_cache_free_blocks", "Free device KV-cache blocks.", s.device_blocks_free);
  // vLLM's name for the host tier: blocks held there by swapped-out sequences (an idle engine holds none).
  double host_usage = s.host_blocks_total > 0
                          ? 1.0 - static_cast<double>(s.host_blocks_free) / static_cast<double>(s.host_blocks_total)
                          : 0.0;
  gauge("troupe:cpu_cache_usage_perc", "Fraction of host (swap) KV-cache blocks in use (1 = full).", host_usage);
  counter("troupe:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
          static_cast<double>(s.prefix_queries));
  counter("troupe:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
          static_cast<double>(s.prefix_hits));
  counter("troupe:kv_window_released_blocks_total",
          "Device KV-cache blocks given back because they fell out of every layer's sliding window.",
          static_cast<double>(s.window_released_blocks));
  out +=
      "# HELP troupe:num_preemptions_total Preempted sequences, by mode.\n# TYPE troupe:num_preemptions_total "
      "counter\n";
  out += "troupe:num_preemptions_total{model_name=\"" + model_name + "\",mode=\"swap\"} " +
         std::to_string(s.preemptions_swap) + "\n";
  out += "troupe:num_preemptions_total{model_name=\"" + model_name + "\",mode=\"recompute\"} " +
         std::to_string(s.preemptions_recompute) + "\n";
  counter("troupe:swap_fallbacks_total", "Swaps that fell back to recompute (host tier full, or the copy failed).",
          static_cast<double>(s.swap_fallbacks));
  out +=
      "# HELP troupe:swap_bytes_total KV bytes of swap preemption, by direction: out (device to host), in (host to "
      "device), in_reused (swapped back without a copy: the device still held the blocks' content).\n# TYPE "
      "troupe:swap_bytes_total counter\n";
  const std::pair<const char*, std::uint64_t> swap_bytes[] = {
      {"out", s.swap_out_bytes}, {"in", s.swap_in_bytes}, {"in_reused", s.swap_in_reused_bytes}};
  for (const auto& [direction, n] : swap_bytes)
    out += "troupe:swap_bytes_total{model_name=\"" + model_name + "\",direction=\"" + direction + "\"} " +
           std::to_string(n) + "\n";
  out +=
      "# HELP troupe:engine_failures_total Failures the engine recovered from, by kind: step (a model step was "
      "lost with its requests), executor_restart, draft (a proposal was lost), draft_restart, swap_copy (the "
      "sequences were recomputed).\n# TYPE troupe:engine_failures_total counter\n";
  const std::pair<const char*, std::uint64_t> failures[] = {{"step", s.step_failures},
                                                            {"executor_restart", s.executor_restarts},
                                                            {"draft", s.draft_failures},
                                                            {"draft_restart", s.draft_restarts},
                                                            {"swap_copy", s.swap_copy_failures}};
  for (const auto& [kind, n] : failures)
    out += "troupe:engine_failures_total{model_name=\"" + model_name + "\",kind=\"" + kind + "\"} " +
           std::to_string(n) + "\n";
  counter("troupe:spec_decode_num_draft_tokens_total", "Draft tokens verified (speculative decoding).",
          static_cast<double>(s.spec_drafted));
  counter("troupe:spec_decode_num_accepted_tokens_total", "Draft tokens accepted (speculative decoding).",
          static_cast<double>(s.spec_accepted));
  counter("troupe:spec_decode_num_verifications_total", "Speculative verifications (one per sequence and step).",
          static_cast<double>(s.spec_verifications));
  counter("troupe:structured_output_requests_total", "Requests admitted with a structured-output constraint.",
          static_cast<double>(s.constrained_requests));
  counter("troupe:structured_output_compiles_total", "Structured-output constraints compiled (cache misses).",
          static_cast<double>(s.constraint_compiles));
  counter("troupe:structured_output_cache_hits_total", "Structured-output constraints found compiled at admission.",
          static_cast<double>(s.constraint_cache_hits));
  counter("troupe:structured_output_compile_seconds_total", "Time spent compiling structured-output constraints.",
          s.constraint_compile_ms / 1e3);
  render_samples(out, "troupe:structured_output_mask_seconds",
                 "Per step with constrained rows: time computing their token masks.", s.constraint_mask_us);
  counter("troupe:engine_steps_total", "Engine steps run.", static_cast<double>(s.steps));
  // Where a step's time goes (the first engine_stats::max_samples steps).
  render_samples(out, "troupe:step_device_seconds",
                 "Per step: the model runner's forward pass (CUDA: launches, device time, logits copy).",
                 s.step_device_us);
  render_samples(out, "troupe:step_host_seconds",
                 "Per step: host time besides the forward pass and the draft (planning, KV reserve, "
                 "sampling, messages, fan-out).",
                 s.step_host_us);
  render_samples(out, "troupe:step_gap_seconds",
                 "Between steps run back to back: one step's end to the next one's start.", s.step_gap_us);
  render_samples(out, "troupe:preemption_resume_swap_seconds",
                 "A sequence preempted by swapping out: preemption to its next token.", s.resume_swap_us);
  render_samples(out, "troupe:preemption_resume_recompute_seconds",
                 "A sequence preempted for recompute: preemption to its next token.", s.resume_recompute_us);
  {
    std::lock_guard lock{mutex_};
    counter("troupe:prompt_tokens_total", "Prompt tokens of finished requests.", static_cast<double>(prompt_tokens_));
    counter("troupe:generation_tokens_total", "Generated tokens of finished requests.",
            static_cast<double>(generation_tokens_));
    counter("troupe:tool_calls_total", "Tool calls parsed from replies and sent to clients.",
            static_cast<double>(tool_calls_));
    out +=
        "# HELP troupe:request_success_total Finished requests, by finish reason.\n"
        "# TYPE troupe:request_success_total counter\n";
    for (const auto& [reason, n] : finished_by_reason_)
      out += "troupe:request_success_total{model_name=\"" + model_name + "\",finished_reason=\"" + reason + "\"} " +
             std::to_string(n) + "\n";
    out +=
        "# HELP troupe:request_failure_total Failed requests, by error code.\n"
        "# TYPE troupe:request_failure_total counter\n";
    for (const auto& [code, n] : failed_by_code_)
      out += "troupe:request_failure_total{model_name=\"" + model_name + "\",code=\"" + code + "\"} " +
             std::to_string(n) + "\n";
  }
  ttft_.render(out, "troupe:time_to_first_token_seconds", "Time to first token.");
  itl_.render(out, "troupe:inter_token_latency_seconds", "Gap between consecutive streamed chunks.");
  tpot_.render(out, "troupe:time_per_output_token_seconds", "Mean time per output token after the first.");
  e2e_.render(out, "troupe:e2e_request_latency_seconds", "Arrival to finish.");
  queue_.render(out, "troupe:request_queue_time_seconds", "Arrival to first scheduled.");
  server_latency_.render(out, "troupe:server_frame_latency_seconds",
                         "A streamed chunk's tokens leaving the executor to its frame written to the socket.");
  server_overhead_.render(out, "troupe:server_overhead_seconds",
                          "The same latency over the most recent chunks, as exact quantiles.");
  return out;
}

} // namespace troupe::net
