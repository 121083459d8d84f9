// The router's choice of replica: round-robin over those up, least-loaded, and cache-aware (a prompt goes
// where its beginning went, unless that replica is too busy, and never to one that is down).
#include <doctest/doctest.h>

#include <string>

#include "runtime/replica_chooser.hpp"

using namespace troupe::runtime;

namespace {
std::vector<std::uint64_t> hashes(const std::string& text) {
  return prefix_block_hashes(text, 8, 64);
}
const std::string system_a = "You are the order desk of Acme. Be brief. "; // 5 blocks of 8
const std::string system_b = "You answer billing questions for Initech. "; // 5 blocks of 8
} // namespace

TEST_CASE("prefix block hashes: shared beginnings share hashes, a short tail is not hashed") {
  const auto a = hashes(system_a + "Where is my parcel?");
  const auto b = hashes(system_a + "Cancel my order, please.");
  const auto c = hashes(system_b + "Where is my parcel?");
  REQUIRE(a.size() == (system_a.size() + 19) / 8);
  CHECK(b.size() == (system_a.size() + 24) / 8);
  int shared = 0;
  while (a[static_cast<std::size_t>(shared)] == b[static_cast<std::size_t>(shared)])
    ++shared;
  CHECK(shared == static_cast<int>(system_a.size()) / 8); // up to the first block that differs
  CHECK(a[0] != c[0]);
  CHECK(hashes("short").empty());
  CHECK(prefix_block_hashes(system_a + system_a, 8, 3).size() == 3);
}

TEST_CASE("round-robin takes the replicas up in turn") {
  replica_chooser c(3, routing_policy::round_robin, 0, 100);
  std::vector<replica_load> r(3);
  std::vector<int> got;
  for (int i = 0; i < 4; ++i)
    got.push_back(c.choose({}, r)->replica);
  CHECK(got == std::vector<int>{0, 1, 2, 0});
  r[1].up = false;
  got.clear();
  for (int i = 0; i < 4; ++i)
    got.push_back(c.choose({}, r)->replica);
  CHECK(got == std::vector<int>{2, 0, 2, 0});
  r[0].up = r[2].up = false;
  CHECK_FALSE(c.choose({}, r).has_value());
}

TEST_CASE("least-loaded takes the replica with the fewest requests, the first on ties") {
  replica_chooser c(3, routing_policy::least_loaded, 0, 100);
  std::vector<replica_load> r{{true, 4}, {true, 2}, {true, 2}};
  CHECK(c.choose({}, r)->replica == 1);
  r[1].up = false;
  CHECK(c.choose({}, r)->replica == 2);
}

TEST_CASE("cache-aware sends a prompt where its beginning went, within the load margin") {
  replica_chooser c(2, routing_policy::cache_aware, 2, 1000);
  std::vector<replica_load> r(2);
  // Nothing known: the least loaded.
  r[0].in_flight = 1;
  const auto first = c.choose(hashes(system_a + "one"), r);
  CHECK(first->replica == 1);
  CHECK(first->matched_blocks == 0);
  c.record(1, hashes(system_a + "one"));
  // The same system prompt goes there again, though replica 0 is now less loaded (within the margin) ...
  r = {{true, 0}, {true, 2}};
  const auto again = c.choose(hashes(system_a + "two"), r);
  CHECK(again->replica == 1);
  CHECK(again->matched_blocks == static_cast<int>(system_a.size()) / 8);
  // ... but not past it.
  r = {{true, 0}, {true, 3}};
  CHECK(c.choose(hashes(system_a + "two"), r)->replica == 0);
  // Another system prompt: no match, the least loaded.
  r = {{true, 1}, {true, 0}};
  CHECK(c.choose(hashes(system_b + "x"), r)->replica == 1);
  // A replica that is down is never chosen, and forgetting it drops what it held.
  r = {{true, 0}, {false, 0}};
  CHECK(c.choose(hashes(system_a + "two"), r)->replica == 0);
  c.forget(1);
  CHECK(c.blocks_known(1) == 0);
  r = {{true, 3}, {true, 0}};
  CHECK(c.choose(hashes(system_a + "two"), r)->matched_blocks == 0);
}

TEST_CASE("a replica's table keeps only its most recently routed blocks") {
  replica_chooser c(1, routing_policy::cache_aware, 0, 6);
  c.record(0, hashes(system_a + "x")); // 5 blocks
  c.record(0, hashes(system_b + "y")); // 5 more: the oldest of system_a's go
  CHECK(c.blocks_known(0) == 6);
  std::vector<replica_load> r(1);
  CHECK(c.choose(hashes(system_b + "z"), r)->matched_blocks == 5);
  CHECK(c.choose(hashes(system_a + "z"), r)->matched_blocks == 0); // its first block went first
}

TEST_CASE("routing policies by name") {
  CHECK(parse_routing_policy("cache-aware") == routing_policy::cache_aware);
  CHECK(parse_routing_policy("round-robin") == routing_policy::round_robin);
  CHECK(parse_routing_policy("least-loaded") == routing_policy::least_loaded);
  CHECK_FALSE(parse_routing_policy("random").has_value());
  CHECK(std::string(to_string(routing_policy::least_loaded)) == "least-loaded");
  CHECK_THROWS(replica_chooser(0, routing_policy::round_robin, 0, 1));
}
