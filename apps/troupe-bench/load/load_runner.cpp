// The benchmark's dispatcher is one coroutine on its own strand. It sleeps until each
// request's arrival time, waits for a free slot when concurrency is capped (like vLLM's
// semaphore: a request's clock starts when it is sent, not when it arrived), and spawns
// the request on its transport's strand. A finished request posts back to the
// dispatcher's strand, so its counters need no locks.
#include "apps/troupe-bench/load/load_runner.hpp"

#include <boost/asio.hpp>

#include <algorithm>
#include <thread>

#include "apps/troupe-bench/load/sse_transport.hpp"
#include "apps/troupe-bench/load/ws_transport.hpp"

namespace troupe::bench {

namespace {

namespace asio = boost::asio;
using strand = asio::strand<asio::io_context::executor_type>;

std::unique_ptr<transport> make_transport(asio::io_context& ioc, const load_options& o) {
  if (o.server.kind == transport_kind::ws)
    return make_ws_transport(ioc, o.server, o.sampling, o.ws_connections);
  return make_sse_transport(ioc, o.server, o.sampling);
}

// Parks the dispatcher until a request ends (it cancels the timer) or any earlier wake-up.
asio::awaitable<void> wait_for_wake(asio::steady_timer& wake) {
  wake.expires_at(asio::steady_timer::time_point::max());
  boost::system::error_code cancelled;
  co_await wake.async_wait(asio::redirect_error(asio::use_awaitable, cancelled));
}

class dispatcher {
 public:
  dispatcher(asio::io_context& ioc, const load_options& options, std::span<const bench_request> requests,
             std::span<const bench_request> warmups, load_outcome& outcome)
      : strand_(asio::make_strand(ioc)),
        wake_(strand_),
        options_(options),
        requests_(requests),
        warmups_(warmups),
        outcome_(outcome),
        transport_(make_transport(ioc, options)) {}

  strand executor() const { return strand_; }

  asio::awaitable<void> run() {
    co_await transport_->open();
    co_await warm_up();

    const std::size_t n = requests_.size();
    outcome_.records.resize(n);
    arrival_schedule schedule(options_.arrivals);
    const auto offsets = schedule.offsets(n);
    clock_.start = std::chrono::steady_clock::now();
    asio::steady_timer arrival(strand_);
    for (std::size_t i = 0; i < n; ++i) {
      auto due = clock_.start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(offsets[i]));
      if (due > std::chrono::steady_clock::now()) {
        arrival.expires_at(due);
        co_await arrival.async_wait(asio::use_awaitable);
      }
      while (options_.max_concurrency > 0 && in_flight_ >= options_.max_concurrency)
        co_await wait_for_wake(wake_);
      start(i);
    }
    while (finished_ < n)
      co_await wait_for_wake(wake_);
    outcome_.duration_s = clock_.now();
    co_await transport_->close();
  }

 private:
  // Sends the warm-up requests one at a time on a throw-away clock: they check that
  // the server answers and warm it up, as vLLM's initial test run does.
  asio::awaitable<void> warm_up() {
    for (std::size_t i = 0; i < warmups_.size(); ++i) {
      request_record record;
      co_await asio::co_spawn(transport_->executor_for(i), transport_->run(warmups_[i], record, clock_),
                              asio::use_awaitable);
      if (!record.success && outcome_.warmup_failures++ == 0)
        outcome_.warmup_error = record.error;
    }
  }

  void start(std::size_t i) {
    ++in_flight_;
    auto& record = outcome_.records[i];
    record.index = i;
    record.priority = requests_[i].priority;
    record.expected_prompt_tokens = requests_[i].prompt_len;
    asio::co_spawn(transport_->executor_for(i), transport_->run(requests_[i], record, clock_),
                   [this, &record](std::exception_ptr error) {
                     if (error && record.error.empty()) // transports record their failures; this is a bug's net
                       record_failure(record, clock_, "internal error in the client");
                     asio::post(strand_, [this] {
                       --in_flight_;
                       ++finished_;
                       wake_.cancel();
                     });
                   });
  }

  strand strand_;
  asio::steady_timer wake_; // cancelled whenever a request ends
  const load_options& options_;
  std::span<const bench_request> requests_, warmups_;
  load_outcome& outcome_;
  std::unique_ptr<transport> transport_;
  bench_clock clock_;
  int in_flight_ = 0;
  std::size_t finished_ = 0;
};

} // namespace

load_outcome run_load(const load_options& options, std::span<const bench_request> requests,
                      std::span<const bench_request> warmups) {
  asio::io_context ioc;
  load_outcome outcome;
  dispatcher d(ioc, options, requests, warmups, outcome);
  std::exception_ptr failure;
  asio::co_spawn(d.executor(), d.run(), [&](std::exception_ptr e) { failure = e; });
  std::vector<std::jthread> helpers;
  for (int i = 1; i < options.io_threads; ++i)
    helpers.emplace_back([&] { ioc.run(); });
  ioc.run();
  helpers.clear(); // joins
  if (failure)
    std::rethrow_exception(failure);
  return outcome;
}

} // namespace troupe::bench
