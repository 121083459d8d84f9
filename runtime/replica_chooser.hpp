// Which replica (engine) a request goes to, for the router in front of several engines
// (actors/router.cpp). Plain logic, no actors: round-robin, least-loaded, or cache-aware, which sends
// a prompt where prompts with the same beginning went before (that replica's prefix cache likely
// holds their KV), unless that replica is busier than the least loaded one by more than a margin.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace troupe::runtime {

enum class routing_policy { cache_aware, round_robin, least_loaded };

// "cache-aware" | "round-robin" | "least-loaded"; nullopt for anything else.
std::optional<routing_policy> parse_routing_policy(std::string_view name);
const char* to_string(routing_policy p);

// Chained hashes of a prompt's leading blocks of `block_bytes` bytes (at most max_blocks): hash i
// names bytes [0, (i + 1) * block_bytes), so two prompts share hash i exactly when they share
// (barring collisions) that much of their beginning. A tail shorter than a block is not hashed.
std::vector<std::uint64_t> prefix_block_hashes(std::string_view prompt, std::size_t block_bytes,
                                               std::size_t max_blocks);

// What the chooser needs of a replica now.
struct replica_load {
  bool up = true;
  int in_flight = 0; // requests sent to it and not ended
};

struct replica_choice {
  int replica = -1;
  int matched_blocks = 0; // cache-aware: the leading blocks that replica was sent before
};

class replica_chooser {
 public:
  // max_blocks_per_replica bounds each replica's table (least recently routed blocks go first), as its
  // prefix cache drops what is least recently used.
  replica_chooser(int replicas, routing_policy policy, int load_margin, std::size_t max_blocks_per_replica);

  // The replica for a prompt with these prefix hashes, among those up (one entry per replica); nullopt when
  // none is up. Round-robin: the next one up after the last choice.
  // Least-loaded: the lowest load, the lower index on ties. Cache-aware: the replica that was sent the
  // longest run of these leading blocks, if its load is at most the lowest load + load_margin and the
  // run is at least one block; else least-loaded.
  std::optional<replica_choice> choose(std::span<const std::uint64_t> prefix, std::span<const replica_load> replicas);

  // A prompt with these prefix hashes went to `replica`: its blocks now count as there (refreshing them).
  void record(int replica, std::span<const std::uint64_t> prefix);
  // The replica went down (or restarted): nothing is cached there any more.
  void forget(int replica);

  routing_policy policy() const { return policy_; }
  std::size_t blocks_known(int replica) const { return tables_.at(static_cast<std::size_t>(replica)).index.size(); }

 private:
  struct table {
    std::list<std::uint64_t> lru; // most recently routed first
    std::unordered_map<std::uint64_t, std::list<std::uint64_t>::iterator> index;
  };
  int matched(const table& t, std::span<const std::uint64_t> prefix) const;

  routing_policy policy_;
  int load_margin_;
  std::size_t max_blocks_;
  std::vector<table> tables_;
  int next_ = 0; // round-robin's next candidate
};

} // namespace troupe::runtime
