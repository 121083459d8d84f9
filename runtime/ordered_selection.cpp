// A take scans the row four logits to a compare, gathers the band's ids as 64-bit keys that order like (logit
// descending, id ascending), sorts them and appends them. Bands are gathered in ascending id order, so a stable
// radix sort on the logit half alone orders them as a sort of the whole keys would.
#include "runtime/ordered_selection.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <utility>

namespace troupe::runtime {

namespace {
// GCC/Clang vector extensions: SSE2 on any x86-64, NEON on arm64, no target flags.
using f32x4 = float __attribute__((vector_size(16)));
using i32x4 = std::int32_t __attribute__((vector_size(16)));

constexpr float infinity = std::numeric_limits<float>::infinity();
constexpr std::size_t radix_sort_from = 512; // below it std::sort is as fast

bool any_lane(i32x4 mask) {
  std::uint64_t half[2];
  std::memcpy(half, &mask, sizeof half);
  return (half[0] | half[1]) != 0;
}

// The key's upper half is the logit's bits made into an unsigned integer that ascends with the float, inverted;
// -0 is made +0 first, since the two compare equal. The lower half is the id.
std::uint64_t order_key(float logit, std::size_t id) {
  const auto bits = std::bit_cast<std::uint32_t>(logit + 0.0f);
  const std::uint32_t ascending = (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
  return (std::uint64_t{~ascending} << 32) | static_cast<std::uint32_t>(id);
}

float logit_of(std::uint64_t key) {
  const auto ascending = ~static_cast<std::uint32_t>(key >> 32);
  return std::bit_cast<float>((ascending & 0x80000000u) != 0 ? ascending & 0x7fffffffu : ~ascending);
}

// Calls visit(i, logits[i]) in ascending i for every i with lower() <= logits[i] < upper. lower() is read once
// per block of four, so a visit that raises it may still be handed the rest of its block.
template <class Lower, class Visit>
void scan(std::span<const float> logits, Lower lower, float upper, Visit visit) {
  const std::size_t n = logits.size();
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    f32x4 l;
    std::memcpy(&l, logits.data() + i, sizeof l);
    const float low = lower();
    if (!any_lane((l >= low) & (l < upper)))
      continue;
    for (int lane = 0; lane < 4; ++lane)
      if (l[lane] >= low && l[lane] < upper)
        visit(i + lane, l[lane]);
  }
  for (; i < n; ++i)
    if (logits[i] >= lower() && logits[i] < upper)
      visit(i, logits[i]);
}

// LSD radix sort on the keys' upper (logit) half, 11 bits at a time; stable. A digit that every key shares is
// skipped. The result ends up in keys or in scratch (as large): the span returned.
std::span<std::uint64_t> radix_sort_by_logit(std::span<std::uint64_t> keys, std::span<std::uint64_t> scratch) {
  constexpr int digits = 3, bits = 11;
  constexpr std::uint64_t mask = (1u << bits) - 1;
  std::array<std::array<std::uint32_t, 1u << bits>, digits> counts{};
  for (const auto key : keys)
    for (int d = 0; d < digits; ++d)
      ++counts[d][(key >> (32 + bits * d)) & mask];
  for (int d = 0; d < digits; ++d) {
    const int shift = 32 + bits * d;
    auto& next = counts[d];
    if (next[(keys[0] >> shift) & mask] == keys.size())
      continue;
    std::uint32_t offset = 0;
    for (auto& c : next)
      offset += std::exchange(c, offset);
    for (const auto key : keys)
      scratch[next[(key >> shift) & mask]++] = key;
    std::swap(keys, scratch);
  }
  return keys;
}
} // namespace

void ordered_selection::reset(std::span<const float> logits) {
  logits_ = logits;
  ids_.clear();
  floor_ = infinity;
  closed_ = false;
}

std::size_t ordered_selection::take_down_to(float bound) {
  if (closed_ || !(bound < floor_))
    return 0;
  // The same scan as scan() but without a branch per id: a wide band holds about every other one, which no
  // branch predicts. Every id of a block that has any is written, and counted only when it belongs.
  const std::size_t n = logits_.size();
  if (keys_.size() < n + 4)
    keys_.resize(n + 4); // grown once, never shrunk: a resize would zero what it grows
  std::size_t count = 0, i = 0;
  for (; i + 4 <= n; i += 4) {
    f32x4 l;
    std::memcpy(&l, logits_.data() + i, sizeof l);
    const i32x4 in_band = (l >= bound) & (l < floor_);
    if (!any_lane(in_band))
      continue;
    for (int lane = 0; lane < 4; ++lane) {
      keys_[count] = order_key(l[lane], i + lane);
      count -= in_band[lane]; // -1 when in the band
    }
  }
  for (; i < n; ++i) {
    keys_[count] = order_key(logits_[i], i);
    count += logits_[i] >= bound && logits_[i] < floor_;
  }
  floor_ = bound;
  append_sorted(std::span(keys_).first(count), true);
  return count;
}

std::size_t ordered_selection::take_next() {
  if (closed_ || complete())
    return 0;
  float highest = -infinity;
  scan(
      logits_, [&] { return highest; }, floor_, [&](std::size_t, float l) { highest = std::max(highest, l); });
  return take_down_to(highest);
}

void ordered_selection::take_best(std::size_t n) {
  closed_ = true;
  if (n == 0)
    return;
  // The buffer gathers candidates; whenever it fills up only its n best stay, and from then on only a key below
  // the n-th of those (and so a logit at least its logit) can be among the n best.
  const std::size_t capacity = std::max<std::size_t>(2 * n, 256);
  if (keys_.size() < capacity)
    keys_.resize(capacity);
  std::size_t count = 0;
  std::uint64_t limit = std::numeric_limits<std::uint64_t>::max();
  float limit_logit = -infinity;
  auto keep_best = [&] {
    std::nth_element(keys_.begin(), keys_.begin() + static_cast<std::ptrdiff_t>(n - 1),
                     keys_.begin() + static_cast<std::ptrdiff_t>(count));
    count = n;
  };
  scan(
      logits_, [&] { return limit_logit; }, infinity,
      [&](std::size_t i, float l) {
        const std::uint64_t key = order_key(l, i);
        if (key >= limit)
          return;
        keys_[count++] = key;
        if (count == capacity) {
          keep_best();
          limit = keys_[n - 1];
          limit_logit = logit_of(limit);
        }
      });
  if (count > n)
    keep_best();
  append_sorted(std::span(keys_).first(count), false);
}

void ordered_selection::append_sorted(std::span<std::uint64_t> keys, bool in_id_order) {
  if (in_id_order && keys.size() >= radix_sort_from) {
    if (scratch_.size() < keys.size())
      scratch_.resize(keys_.size());
    keys = radix_sort_by_logit(keys, std::span(scratch_).first(keys.size()));
  } else {
    std::sort(keys.begin(), keys.end());
  }
  for (const auto key : keys)
    ids_.push_back(static_cast<token_id>(key & 0xffffffffu));
}

} // namespace troupe::runtime
