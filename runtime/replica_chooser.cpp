// Choosing a replica for a request (see replica_chooser.hpp).
#include "runtime/replica_chooser.hpp"

#include <stdexcept>

namespace troupe::runtime {

std::optional<routing_policy> parse_routing_policy(std::string_view name) {
  if (name == "cache-aware")
    return routing_policy::cache_aware;
  if (name == "round-robin")
    return routing_policy::round_robin;
  if (name == "least-loaded")
    return routing_policy::least_loaded;
  return std::nullopt;
}

const char* to_string(routing_policy p) {
  switch (p) {
    case routing_policy::cache_aware:
      return "cache-aware";
    case routing_policy::round_robin:
      return "round-robin";
    case routing_policy::least_loaded:
      return "least-loaded";
  }
  return "?";
}

std::vector<std::uint64_t> prefix_block_hashes(std::string_view prompt, std::size_t block_bytes,
                                               std::size_t max_blocks) {
  std::vector<std::uint64_t> hashes;
  std::uint64_t h = 0xcbf29ce484222325ULL; // FNV-1a, carried from block to block
  for (std::size_t b = 0; b < max_blocks && (b + 1) * block_bytes <= prompt.size(); ++b) {
    for (std::size_t i = b * block_bytes; i < (b + 1) * block_bytes; ++i) {
      h ^= static_cast<unsigned char>(prompt[i]);
      h *= 0x100000001b3ULL;
    }
    hashes.push_back(h);
  }
  return hashes;
}

replica_chooser::replica_chooser(int replicas, routing_policy policy, int load_margin,
                                 std::size_t max_blocks_per_replica)
    : policy_(policy),
      load_margin_(load_margin),
      max_blocks_(max_blocks_per_replica),
      tables_(static_cast<std::size_t>(replicas)) {
  if (replicas < 1)
    throw std::invalid_argument("a router needs at least one replica");
}

int replica_chooser::matched(const table& t, std::span<const std::uint64_t> prefix) const {
  int n = 0;
  while (n < static_cast<int>(prefix.size()) && t.index.contains(prefix[static_cast<std::size_t>(n)]))
    ++n;
  return n;
}

std::optional<replica_choice> replica_chooser::choose(std::span<const std::uint64_t> prefix,
                                                      std::span<const replica_load> replicas) {
  const int n = static_cast<int>(tables_.size());
  if (replicas.size() != tables_.size())
    throw std::invalid_argument("replica_chooser::choose: one entry per replica");
  auto up = [&](int r) { return replicas[static_cast<std::size_t>(r)].up; };
  auto load = [&](int r) { return replicas[static_cast<std::size_t>(r)].in_flight; };
  if (policy_ == routing_policy::round_robin) {
    for (int k = 0; k < n; ++k) {
      const int r = (next_ + k) % n;
      if (up(r)) {
        next_ = (r + 1) % n;
        return replica_choice{r, 0};
      }
    }
    return std::nullopt;
  }
  int least = -1;
  for (int r = 0; r < n; ++r)
    if (up(r) && (least < 0 || load(r) < load(least)))
      least = r;
  if (least < 0)
    return std::nullopt;
  if (policy_ == routing_policy::cache_aware) {
    int best = -1, best_run = 0;
    for (int r = 0; r < n; ++r) {
      if (!up(r))
        continue;
      const int run = matched(tables_[static_cast<std::size_t>(r)], prefix);
      if (run > best_run || (run == best_run && run > 0 && load(r) < load(best))) {
        best = r;
        best_run = run;
      }
    }
    if (best >= 0 && load(best) <= load(least) + load_margin_)
      return replica_choice{best, best_run};
  }
  return replica_choice{least, 0};
}

void replica_chooser::record(int replica, std::span<const std::uint64_t> prefix) {
  auto& t = tables_.at(static_cast<std::size_t>(replica));
  for (const auto h : prefix) {
    if (auto it = t.index.find(h); it != t.index.end())
      t.lru.erase(it->second);
    t.lru.push_front(h);
    t.index[h] = t.lru.begin();
  }
  while (t.index.size() > max_blocks_) {
    t.index.erase(t.lru.back());
    t.lru.pop_back();
  }
}

void replica_chooser::forget(int replica) {
  auto& t = tables_.at(static_cast<std::size_t>(replica));
  t.lru.clear();
  t.index.clear();
}

} // namespace troupe::runtime
