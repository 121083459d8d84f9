// Generate requests in flight per API key (server.max-inflight-per-key): one
// key cannot hold more of the engine than its share, on however many
// connections its requests come. Keys are known by their index in the server's
// key list, so no secret is kept here. Every session shares one counter:
// thread-safe.
#pragma once

#include <cstddef>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace troupe::net {

class inflight_per_key {
 public:
  // Holds one request's place until it is destroyed. An empty ticket (no key, or no limit) holds nothing.
  class ticket {
   public:
    ticket() = default;
    ticket(ticket&& other) noexcept : owner_(other.owner_), key_(other.key_) { other.owner_ = nullptr; }
    ticket& operator=(ticket&& other) noexcept;
    ticket(const ticket&) = delete;
    ticket& operator=(const ticket&) = delete;
    ~ticket() { reset(); }
    void reset();

   private:
    friend class inflight_per_key;
    ticket(inflight_per_key* owner, std::size_t key) : owner_(owner), key_(key) {}
    inflight_per_key* owner_ = nullptr;
    std::size_t key_ = 0;
  };

  explicit inflight_per_key(int limit = 0) : limit_(limit) {} // 0 = unlimited
  inflight_per_key(const inflight_per_key&) = delete;
  inflight_per_key& operator=(const inflight_per_key&) = delete;

  int limit() const { return limit_; }
  // A place for one more request of `key` (nullopt: the API is open, nothing to count), or
  // nothing when the key has `limit` in flight already.
  std::optional<ticket> try_acquire(std::optional<std::size_t> key);
  int in_flight(std::size_t key) const;

 private:
  void release(std::size_t key);

  int limit_;
  mutable std::mutex mutex_;
  std::unordered_map<std::size_t, int> counts_; // keys with requests in flight only
};

} // namespace troupe::net
