// The per-key counter and its tickets.
#include "net/inflight_per_key.hpp"

namespace troupe::net {

inflight_per_key::ticket& inflight_per_key::ticket::operator=(ticket&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = other.owner_;
    key_ = other.key_;
    other.owner_ = nullptr;
  }
  return *this;
}

void inflight_per_key::ticket::reset() {
  if (owner_)
    owner_->release(key_);
  owner_ = nullptr;
}

std::optional<inflight_per_key::ticket> inflight_per_key::try_acquire(std::optional<std::size_t> key) {
  if (!key || limit_ <= 0)
    return ticket{};
  std::lock_guard lock{mutex_};
  int& n = counts_[*key];
  if (n >= limit_)
    return std::nullopt;
  ++n;
  return ticket{this, *key};
}

int inflight_per_key::in_flight(std::size_t key) const {
  std::lock_guard lock{mutex_};
  auto it = counts_.find(key);
  return it == counts_.end() ? 0 : it->second;
}

void inflight_per_key::release(std::size_t key) {
  std::lock_guard lock{mutex_};
  auto it = counts_.find(key);
  if (it != counts_.end() && --it->second <= 0)
    counts_.erase(it);
}

} // namespace troupe::net
