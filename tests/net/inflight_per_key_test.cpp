// The per-key in-flight counter: a key gets at most `limit` places, a place
// comes back when its ticket goes (also when moved and reset), keys do not
// share places, and no key or no limit means nothing is counted.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <utility>
#include <vector>

#include "net/inflight_per_key.hpp"

using troupe::net::inflight_per_key;

TEST_CASE("a key gets at most limit places and a place comes back when its ticket goes") {
  inflight_per_key counter(2);
  auto a1 = counter.try_acquire(0);
  auto a2 = counter.try_acquire(0);
  REQUIRE(a1);
  REQUIRE(a2);
  CHECK(counter.in_flight(0) == 2);
  CHECK_FALSE(counter.try_acquire(0));
  auto b = counter.try_acquire(1); // another key has its own places
  CHECK(b);
  CHECK(counter.in_flight(1) == 1);
  a1->reset();
  CHECK(counter.in_flight(0) == 1);
  auto a3 = counter.try_acquire(0);
  CHECK(a3);
  {
    inflight_per_key::ticket moved = std::move(*a3); // the place moves with the ticket, it is not doubled
    CHECK(counter.in_flight(0) == 2);
    a3.reset();
    CHECK(counter.in_flight(0) == 2);
  }
  CHECK(counter.in_flight(0) == 1);
}

TEST_CASE("without a key or without a limit nothing is counted or refused") {
  inflight_per_key unlimited(0);
  for (int i = 0; i < 100; ++i)
    CHECK(unlimited.try_acquire(7));
  inflight_per_key limited(1);
  auto open_api_1 = limited.try_acquire(std::nullopt);
  auto open_api_2 = limited.try_acquire(std::nullopt);
  CHECK(open_api_1);
  CHECK(open_api_2);
}

TEST_CASE("concurrent sessions never hold more than limit places of one key") {
  inflight_per_key counter(3);
  std::atomic<int> held{0}, most{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i)
        if (auto ticket = counter.try_acquire(5)) {
          int now = ++held;
          for (int m = most; now > m && !most.compare_exchange_weak(m, now);) {
          }
          --held;
        }
    });
  for (auto& t : threads)
    t.join();
  CHECK(most <= 3);
  CHECK(counter.in_flight(5) == 0);
}
