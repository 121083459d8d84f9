// The block manager hands out, shares, copies, swaps and frees KV blocks without losing one or ever giving a sequence
// a block whose content belongs to another prefix. Invariants are checked after every operation.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

#include "runtime/block_manager.hpp"

using troupe::runtime::block_copy;
using troupe::runtime::block_manager;
using troupe::runtime::block_manager_config;
using troupe::runtime::kv_tier;
using troupe::runtime::seq_id;
using troupe::runtime::token_id;

namespace {

constexpr kv_tier device = kv_tier::device;
constexpr kv_tier host = kv_tier::host;

void sane(const block_manager& m) {
  REQUIRE_NOTHROW(m.check_invariants());
}

std::vector<token_id> tokens_from(token_id first, int n) {
  std::vector<token_id> t(n);
  for (int i = 0; i < n; ++i)
    t[i] = first + i;
  return t;
}

std::vector<std::int32_t> table_of(const block_manager& m, seq_id id) {
  auto t = m.block_table(id);
  return {t.begin(), t.end()};
}

// Adds a sequence and computes its whole prompt: grow from the cached prefix, then mark it computed.
int add_and_compute(block_manager& m, seq_id id, const std::vector<token_id>& prompt) {
  const int hits = m.add_sequence(id, prompt);
  sane(m);
  const auto copies = m.grow(id, static_cast<int>(prompt.size()), hits);
  REQUIRE(copies.has_value());
  sane(m);
  m.mark_computed(id, prompt, static_cast<int>(prompt.size()));
  sane(m);
  return hits;
}

} // namespace

TEST_CASE("blocks round-trip: grow hands them out, free returns all, grow refuses when short and changes nothing") {
  block_manager m({.device_blocks = 8, .host_blocks = 4, .block_size = 4});
  sane(m);
  CHECK(m.add_sequence(1, tokens_from(0, 10)) == 0);
  sane(m);
  CHECK(m.block_table(1).empty()); // add_sequence allocates nothing
  auto copies = m.grow(1, 10, 0);
  sane(m);
  REQUIRE(copies.has_value());
  CHECK(copies->empty());
  CHECK(m.block_table(1).size() == 3);
  CHECK(m.free_blocks(device) == 5);

  CHECK(m.add_sequence(2, tokens_from(100, 20)) == 0);
  sane(m);
  REQUIRE(m.grow(2, 20, 0).has_value());
  sane(m);
  CHECK(m.free_blocks(device) == 0);

  const auto before = table_of(m, 1);
  CHECK_FALSE(m.can_grow(1, 13, 10));
  CHECK_FALSE(m.grow(1, 13, 10).has_value());
  sane(m);
  CHECK(table_of(m, 1) == before);
  CHECK(m.free_blocks(device) == 0);
  CHECK(m.can_grow(1, 12, 10)); // fits in the blocks it has
  REQUIRE(m.grow(1, 12, 10).has_value());
  sane(m);
  CHECK(table_of(m, 1) == before);

  m.free_sequence(1);
  sane(m);
  m.free_sequence(2);
  sane(m);
  CHECK(m.free_blocks(device) == 8);
  CHECK(m.free_blocks(host) == 4);
  CHECK(m.total_blocks(device) == 8);
  CHECK(m.total_blocks(host) == 4);
  CHECK_FALSE(m.contains(1));
}

TEST_CASE("a later prompt sharing the first full blocks of a freed sequence reuses them") {
  block_manager m({.device_blocks = 16, .host_blocks = 0, .block_size = 4});
  const auto a_prompt = tokens_from(100, 14); // 3.5 blocks
  CHECK(add_and_compute(m, 1, a_prompt) == 0);
  const auto a_table = table_of(m, 1);
  m.free_sequence(1);
  sane(m);
  CHECK(m.free_blocks(device) == 16); // cached-free blocks count as free

  auto b_prompt = tokens_from(100, 12);
  for (token_id t : {900, 901, 902, 903, 904})
    b_prompt.push_back(t);
  // The peek sees the same hits and changes nothing: no reference, no stats.
  const auto stats_before = m.stats();
  CHECK(m.cached_prefix_tokens(b_prompt) == 12);
  CHECK(m.cached_prefix_tokens(a_prompt) == 12); // the half block at its end was never indexed
  CHECK(m.cached_prefix_tokens(tokens_from(500, 12)) == 0);
  CHECK(m.stats().prefix_queries == stats_before.prefix_queries);
  CHECK(m.stats().prefix_hits == stats_before.prefix_hits);
  CHECK(m.free_blocks(device) == 16);
  sane(m);
  CHECK(m.add_sequence(2, b_prompt) == 12);
  sane(m);
  const auto b_table = table_of(m, 2);
  REQUIRE(b_table.size() == 3);
  CHECK(std::equal(b_table.begin(), b_table.end(), a_table.begin()));
  const auto copies = m.grow(2, 17, 12); // position 12 starts a fresh block: nothing shared is written
  sane(m);
  REQUIRE(copies.has_value());
  CHECK(copies->empty());
  CHECK(m.block_table(2).size() == 5);
  CHECK(m.stats().cow_copies == 0);
}

TEST_CASE("a fully cached prompt reports size-1 hits and its shared last block is copied before the write") {
  block_manager m({.device_blocks = 16, .host_blocks = 0, .block_size = 4});
  const auto prompt = tokens_from(7, 8); // exactly two blocks
  add_and_compute(m, 1, prompt);
  const auto a_table = table_of(m, 1);

  CHECK(m.add_sequence(2, prompt) == 7);
  sane(m);
  CHECK(table_of(m, 2) == a_table);
  const auto copies = m.grow(2, 8, 7); // recompute the last token: it lands in block 1, which seq 1 holds too
  sane(m);
  REQUIRE(copies.has_value());
  REQUIRE(copies->size() == 1);
  CHECK(copies->front().src == a_table[1]);
  CHECK(copies->front().dst == m.block_table(2)[1]);
  CHECK(m.block_table(2)[0] == a_table[0]);
  CHECK(table_of(m, 1) == a_table);
  CHECK(m.stats().cow_copies == 1);

  SUBCASE("held by no other table, the block is rewritten in place with the same tokens and stays cached") {
    m.free_sequence(1);
    sane(m);
    m.free_sequence(2);
    sane(m);
    CHECK(m.add_sequence(3, prompt) == 7);
    sane(m);
    const auto t3 = table_of(m, 3);
    const auto in_place = m.grow(3, 8, 7);
    sane(m);
    REQUIRE(in_place.has_value());
    CHECK(in_place->empty());
    m.free_sequence(3);
    sane(m);
    CHECK(m.add_sequence(4, prompt) == 7);
    sane(m);
    CHECK(table_of(m, 4) == t3);
  }
}

TEST_CASE("an equal hash with different tokens is never a hit") {
  // Every block collides: only the stored token ids can tell them apart.
  block_manager m({.device_blocks = 8, .host_blocks = 0, .block_size = 4},
                  [](std::uint64_t, std::span<const token_id>) -> std::uint64_t { return 42; });
  const auto x = tokens_from(10, 5);
  add_and_compute(m, 1, x);
  m.free_sequence(1);
  sane(m);
  CHECK(m.add_sequence(2, x) == 4); // same tokens: a real hit
  sane(m);
  CHECK(m.add_sequence(3, tokens_from(50, 5)) == 0); // same hash, other tokens: a miss
  sane(m);
  CHECK(m.block_table(3).empty());
}

TEST_CASE("a block with equal tokens and hash but another prefix before it is never a hit") {
  // A hash blind to the parent: block [P2] after [P1] and after [Q1] collide; only the chain link tells them apart.
  block_manager m({.device_blocks = 8, .host_blocks = 0, .block_size = 2},
                  [](std::uint64_t, std::span<const token_id> t) -> std::uint64_t {
                    return static_cast<std::uint64_t>(t[0]) * 1000 + t[1];
                  });
  add_and_compute(m, 1, {1, 1, 5, 5, 9}); // [P1][P2]
  add_and_compute(m, 2, {2, 2, 5, 5, 9}); // [Q1][P2]: its [P2] now owns the hash slot
  const auto b_table = table_of(m, 2);
  CHECK(m.add_sequence(3, std::vector<token_id>{1, 1, 5, 5, 9}) == 2); // [P1] hits, the slot's [P2] follows [Q1]
  sane(m);
  REQUIRE(m.block_table(3).size() == 1);
  CHECK(m.block_table(3)[0] == table_of(m, 1)[0]);
  CHECK(std::ranges::find(b_table, m.block_table(3)[0]) == b_table.end());
}

TEST_CASE("a prompt sharing the first tokens of a live sequence's partly filled block shares it, copied on write") {
  block_manager m({.device_blocks = 8, .host_blocks = 0, .block_size = 4});
  const auto a = tokens_from(0, 10); // 2 full blocks, then [8, 9] in block 2
  add_and_compute(m, 1, a);
  const auto ta = table_of(m, 1);
  auto b = a;
  b.push_back(50);
  b.push_back(51);
  CHECK(m.cached_prefix_tokens(b) == 10);
  CHECK(m.add_sequence(2, b) == 10); // 8 from the full blocks, 2 from seq 1's partly filled block
  sane(m);
  const auto tb = table_of(m, 2);
  REQUIRE(tb.size() == 3);
  CHECK(tb == ta);
  CHECK(m.stats().prefix_partial_hits == 2);
  // The first write into the shared block copies it; seq 1 keeps the original.
  const auto copies = m.grow(2, 12, 10);
  REQUIRE(copies.has_value());
  REQUIRE(copies->size() == 1);
  CHECK(copies->at(0).src == ta[2]);
  CHECK(table_of(m, 2)[2] == copies->at(0).dst);
  CHECK(table_of(m, 1) == ta);
  sane(m);
  m.mark_computed(2, b, 12);
  sane(m);

  // Only tokens that agree count, at least two of them, and never the prompt's last token.
  CHECK(m.cached_prefix_tokens(tokens_from(0, 10)) == 8); // [8, 9] agree, but 9 is the last token: one is too few
  auto c = tokens_from(0, 10);
  c.push_back(70); // [8, 9] agree, 70 differs from 50
  CHECK(m.cached_prefix_tokens(c) == 10);
  auto one = tokens_from(0, 9);
  one.push_back(70); // only [8] agrees
  one.push_back(71);
  CHECK(m.cached_prefix_tokens(one) == 8);
  // Another first block: another prefix, no partial hit even with equal tokens in block 2's position.
  auto d = tokens_from(100, 8);
  d.push_back(8);
  d.push_back(9);
  d.push_back(10);
  CHECK(m.cached_prefix_tokens(d) == 0);
}

TEST_CASE("a shared system prompt ending inside a block: the next request shares that block's first tokens") {
  // The customer-service shape: S = 10 tokens (2 full blocks and 2 tokens), then each request's own turn.
  block_manager m({.device_blocks = 8, .host_blocks = 0, .block_size = 4});
  const auto s = tokens_from(0, 10);
  auto a = s;
  for (token_id t : {50, 51, 52, 53, 54, 55})
    a.push_back(t);
  add_and_compute(m, 1, a); // block 2 = [8, 9, 50, 51], full and indexed
  const auto ta = table_of(m, 1);
  auto b = s;
  for (token_id t : {60, 61, 62})
    b.push_back(t);
  CHECK(m.add_sequence(2, b) == 10); // 8 from the chain, then [8, 9] of seq 1's third block
  sane(m);
  CHECK(table_of(m, 2)[2] == ta[2]);
  auto copies = m.grow(2, 13, 10);
  REQUIRE(copies.has_value());
  REQUIRE(copies->size() == 1); // seq 1 still holds it: copied before seq 2 writes 60 over 50
  CHECK(copies->at(0).src == ta[2]);
  m.mark_computed(2, b, 13);
  sane(m);

  // Once nobody holds it, the cached block is still copied before the write: its full content stays cached.
  m.free_sequence(1);
  m.free_sequence(2);
  sane(m);
  auto c = s;
  for (token_id t : {50, 70})
    c.push_back(t);
  CHECK(m.add_sequence(3, c) == 11); // [8, 9, 50] of seq 1's old block 2
  sane(m);
  CHECK(table_of(m, 3)[2] == ta[2]);
  copies = m.grow(3, 12, 11);
  REQUIRE(copies.has_value());
  REQUIRE(copies->size() == 1);
  CHECK(copies->at(0).src == ta[2]);
  sane(m);
  auto d = a; // seq 1's prompt again: every full block still cached
  d.push_back(99);
  CHECK(m.cached_prefix_tokens(d) == 16);
}

TEST_CASE("a partly filled block is offered only while its owner holds and extends it") {
  block_manager m({.device_blocks = 8, .host_blocks = 8, .block_size = 4});
  const auto a = tokens_from(0, 7); // block 1 is [4, 5, 6]
  auto probe = a;
  probe.push_back(99);
  add_and_compute(m, 1, a);
  CHECK(m.cached_prefix_tokens(probe) == 7);
  // Trimmed into its partial block: the offer goes until it computes again.
  m.trim(1, 6);
  sane(m);
  CHECK(m.cached_prefix_tokens(probe) == 4);
  m.mark_computed(1, a, 6);
  sane(m);
  CHECK(m.cached_prefix_tokens(probe) == 6);
  // With one token in the block there is nothing to offer (a hit needs two).
  m.trim(1, 5);
  m.mark_computed(1, a, 5);
  sane(m);
  CHECK(m.cached_prefix_tokens(probe) == 4);
  REQUIRE(m.grow(1, 6, 5).has_value());
  m.mark_computed(1, a, 6);
  // Swapped out: its device blocks are no longer its own to offer (the full one stays indexed).
  REQUIRE(m.swap_out(1).has_value());
  sane(m);
  CHECK(m.cached_prefix_tokens(probe) == 4);
  m.commit_swap_out(1);
  REQUIRE(m.swap_in(1).has_value());
  m.commit_swap_in(1);
  m.mark_computed(1, a, 6);
  sane(m);
  CHECK(m.cached_prefix_tokens(probe) == 6);
  m.free_sequence(1);
  sane(m);
  CHECK(m.cached_prefix_tokens(probe) == 4);
}

TEST_CASE("cached-free blocks are evicted least recently freed first, an evicted prefix then misses") {
  block_manager m({.device_blocks = 6, .host_blocks = 0, .block_size = 4});
  const auto a = tokens_from(100, 8), b = tokens_from(200, 8);
  add_and_compute(m, 1, a);
  add_and_compute(m, 2, b);
  const auto a_table = table_of(m, 1), b_table = table_of(m, 2);
  m.free_sequence(1); // A is freed first: it is the older
  sane(m);
  m.free_sequence(2);
  sane(m);
  CHECK(m.free_blocks(device) == 6);

  CHECK(m.add_sequence(3, tokens_from(300, 16)) == 0);
  sane(m);
  REQUIRE(m.grow(3, 16, 0).has_value()); // 2 free blocks, then 2 evictions
  sane(m);
  CHECK(m.stats().evictions == 2);
  const auto c_table = table_of(m, 3);
  for (auto blk : a_table)
    CHECK(std::ranges::find(c_table, blk) != c_table.end());
  for (auto blk : b_table)
    CHECK(std::ranges::find(c_table, blk) == c_table.end());

  CHECK(m.add_sequence(4, a) == 0); // evicted
  sane(m);
  CHECK(m.add_sequence(5, b) == 7); // still cached
  sane(m);
  CHECK(table_of(m, 5) == b_table);
}

TEST_CASE("a freed chain loses its tail block before its head") {
  block_manager m({.device_blocks = 4, .host_blocks = 0, .block_size = 4});
  const auto a = tokens_from(100, 13); // 3 full blocks + 1 token
  add_and_compute(m, 1, a);
  m.free_sequence(1);
  sane(m);
  m.add_sequence(2, tokens_from(500, 8));
  sane(m);
  REQUIRE(m.grow(2, 8, 0).has_value()); // the free block, then one eviction
  sane(m);
  CHECK(m.stats().evictions == 1);
  CHECK(m.add_sequence(3, a) == 8);
  sane(m);
}

TEST_CASE("a forked child writing into the shared partial block copies it once, the parent keeps the original") {
  block_manager m({.device_blocks = 8, .host_blocks = 0, .block_size = 4});
  const auto prompt = tokens_from(1, 6);
  add_and_compute(m, 1, prompt);
  const auto parent_table = table_of(m, 1);
  m.fork(1, 2);
  sane(m);
  CHECK(table_of(m, 2) == parent_table);
  CHECK(m.free_blocks(device) == 6);

  CHECK(m.can_grow(2, 7, 6));
  const auto copies = m.grow(2, 7, 6);
  sane(m);
  REQUIRE(copies.has_value());
  REQUIRE(copies->size() == 1);
  CHECK(copies->front() == block_copy{parent_table[1], m.block_table(2)[1]});
  CHECK(m.block_table(2)[1] != parent_table[1]);
  CHECK(m.block_table(2)[0] == parent_table[0]); // the full block stays shared
  CHECK(table_of(m, 1) == parent_table);

  const auto parent_copies = m.grow(1, 7, 6); // the parent now holds its block alone
  sane(m);
  REQUIRE(parent_copies.has_value());
  CHECK(parent_copies->empty());
  CHECK(m.stats().cow_copies == 1);
  m.free_sequence(1);
  sane(m);
  m.free_sequence(2);
  sane(m);
  CHECK(m.free_blocks(device) == 8);
}

TEST_CASE("swap out moves the table to the host with ordered copies, commit frees the device blocks, swap in mirrors") {
  // Without prefix caching nothing stays resident: every block goes out and comes back by copy.
  block_manager m({.device_blocks = 8, .host_blocks = 4, .block_size = 4, .enable_prefix_caching = false});
  add_and_compute(m, 1, tokens_from(0, 10));
  const auto dev_table = table_of(m, 1);

  const auto out = m.swap_out(1);
  sane(m);
  REQUIRE(out.has_value());
  REQUIRE(out->size() == 3);
  CHECK(m.tier_of(1) == device); // until the copies are done
  CHECK(table_of(m, 1) == dev_table);
  CHECK(m.free_blocks(host) == 1);
  for (std::size_t i = 0; i < 3; ++i)
    CHECK(out->at(i).src == dev_table[i]);
  m.commit_swap_out(1);
  sane(m);
  CHECK(m.tier_of(1) == host);
  for (std::size_t i = 0; i < 3; ++i)
    CHECK(m.block_table(1)[i] == out->at(i).dst);
  CHECK(m.free_blocks(device) == 8);
  CHECK(m.stats().swapped_out_blocks == 3);

  CHECK(m.can_swap_in(1));
  const auto host_table = table_of(m, 1);
  const auto in = m.swap_in(1);
  sane(m);
  REQUIRE(in.has_value());
  REQUIRE(in->size() == 3);
  CHECK(m.free_blocks(device) == 5);
  m.commit_swap_in(1);
  sane(m);
  CHECK(m.tier_of(1) == device);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(in->at(i).src == host_table[i]);
    CHECK(m.block_table(1)[i] == in->at(i).dst);
  }
  CHECK(m.free_blocks(host) == 4);
  CHECK(m.stats().swapped_in_blocks == 3);
}

TEST_CASE("swap out refuses when the host is short and swap in when the device is short, changing nothing") {
  block_manager m({.device_blocks = 8, .host_blocks = 4, .block_size = 4});
  add_and_compute(m, 1, tokens_from(0, 20)); // 5 blocks > 4 host blocks
  const auto t1 = table_of(m, 1);
  CHECK_FALSE(m.swap_out(1).has_value());
  sane(m);
  CHECK(m.tier_of(1) == device);
  CHECK(table_of(m, 1) == t1);
  CHECK(m.free_blocks(host) == 4);
  CHECK(m.free_blocks(device) == 3);
  m.free_sequence(1);
  sane(m);

  add_and_compute(m, 2, tokens_from(100, 12)); // 3 blocks
  REQUIRE(m.swap_out(2).has_value());
  sane(m);
  m.commit_swap_out(2);
  sane(m);
  const auto host_table = table_of(m, 2);
  add_and_compute(m, 3, tokens_from(200, 24)); // 6 of the 8 device blocks
  CHECK(m.free_blocks(device) == 2);
  CHECK_FALSE(m.can_swap_in(2));
  CHECK_FALSE(m.swap_in(2).has_value());
  sane(m);
  CHECK(m.tier_of(2) == host);
  CHECK(table_of(m, 2) == host_table);
  CHECK(m.free_blocks(host) == 1);
  CHECK(m.free_blocks(device) == 2);
  m.free_sequence(3);
  sane(m);
  CHECK(m.can_swap_in(2));
}

TEST_CASE("swap in takes the shared prefix blocks still on the device and copies only the rest") {
  // Two sequences share a 2-block prompt prefix (a system prompt); the second is preempted by swap.
  block_manager m({.device_blocks = 8, .host_blocks = 8, .block_size = 4});
  auto prompt = tokens_from(0, 8);
  add_and_compute(m, 1, prompt);
  auto longer = prompt;
  for (token_id t : tokens_from(50, 6))
    longer.push_back(t);
  CHECK(add_and_compute(m, 2, longer) == 8);
  const auto t2 = table_of(m, 2);
  REQUIRE(t2.size() == 4);
  const auto out = m.swap_out(2);
  REQUIRE(out.has_value());
  CHECK(out->size() == 4); // out: every block, the shared ones too (the sharer may free them meanwhile)
  m.commit_swap_out(2);
  sane(m);
  const auto host_table = table_of(m, 2);
  CHECK(m.free_blocks(device) == 6); // seq 1's 2 blocks; seq 2's third (full, indexed) waits cached-free

  const auto in = m.swap_in(2);
  sane(m);
  REQUIRE(in.has_value());
  // Blocks 0 and 1 are seq 1's (held), block 2 is the cached-free one seq 2 left: none copied. Block 3 (partial,
  // never indexed) comes from the host.
  REQUIRE(in->size() == 1);
  CHECK(in->at(0).src == host_table[3]);
  m.commit_swap_in(2);
  sane(m);
  const auto back = table_of(m, 2);
  CHECK(back[0] == t2[0]);
  CHECK(back[1] == t2[1]);
  CHECK(back[2] == t2[2]);
  CHECK(back[3] == in->at(0).dst);
  CHECK(m.stats().swapped_in_blocks == 1);
  CHECK(m.stats().swap_in_reused_blocks == 3);
  CHECK(m.free_blocks(device) == 4);
  CHECK(m.free_blocks(host) == 8);
  // The sequence grows on as before: its next token lands in block 3, which it holds alone.
  const auto copies = m.grow(2, 15, 14);
  REQUIRE(copies.has_value());
  CHECK(copies->empty());
  sane(m);
}

TEST_CASE("swap in copies a block evicted while swapped out, and counts revived cached blocks against the free ones") {
  block_manager m({.device_blocks = 6, .host_blocks = 8, .block_size = 4});
  add_and_compute(m, 1, tokens_from(0, 12)); // 3 full blocks, indexed
  const auto t1 = table_of(m, 1);
  REQUIRE(m.swap_out(1).has_value());
  m.commit_swap_out(1);
  sane(m);
  const auto host_table = table_of(m, 1);
  // Another sequence takes the 3 free blocks and evicts the least recently freed cached one: seq 1's last block.
  add_and_compute(m, 2, tokens_from(100, 16));
  CHECK(m.stats().evictions == 1);
  CHECK(m.free_blocks(device) == 2); // seq 1's blocks 0 and 1, cached-free
  // Reviving blocks 0 and 1 leaves no free block for the copy of block 2.
  CHECK_FALSE(m.can_swap_in(1));
  CHECK_FALSE(m.swap_in(1).has_value());
  sane(m);
  CHECK(table_of(m, 1) == host_table);
  m.free_sequence(2);
  sane(m);
  REQUIRE(m.can_swap_in(1));
  const auto in = m.swap_in(1);
  REQUIRE(in.has_value());
  REQUIRE(in->size() == 1);
  CHECK(in->at(0).src == host_table[2]);
  m.commit_swap_in(1);
  sane(m);
  const auto back = table_of(m, 1);
  CHECK(back[0] == t1[0]);
  CHECK(back[1] == t1[1]);
  CHECK(back[2] == in->at(0).dst);
  CHECK(m.stats().swap_in_reused_blocks == 2);
}

TEST_CASE("a swapped-out sequence gets its own host copy of a block it shares, the sharer keeps the device block") {
  block_manager m({.device_blocks = 8, .host_blocks = 8, .block_size = 4});
  add_and_compute(m, 1, tokens_from(0, 6));
  m.fork(1, 2);
  sane(m);
  const auto shared = table_of(m, 1);
  const auto out = m.swap_out(2);
  sane(m);
  REQUIRE(out.has_value());
  CHECK(out->size() == 2);
  m.commit_swap_out(2);
  sane(m);
  CHECK(table_of(m, 1) == shared);
  CHECK(m.free_blocks(device) == 6);
  CHECK(m.free_blocks(host) == 6);
}

TEST_CASE("freeing a sequence with a swap in flight releases the blocks of both tiers") {
  block_manager m({.device_blocks = 8, .host_blocks = 8, .block_size = 4});
  add_and_compute(m, 1, tokens_from(0, 10));
  REQUIRE(m.swap_out(1).has_value());
  sane(m);
  CHECK(m.free_blocks(host) == 5);
  m.free_sequence(1);
  sane(m);
  CHECK(m.free_blocks(device) == 8);
  CHECK(m.free_blocks(host) == 8);

  add_and_compute(m, 2, tokens_from(0, 10));
  REQUIRE(m.swap_out(2).has_value());
  m.commit_swap_out(2);
  sane(m);
  REQUIRE(m.swap_in(2).has_value());
  sane(m);
  m.free_sequence(2);
  sane(m);
  CHECK(m.free_blocks(device) == 8);
  CHECK(m.free_blocks(host) == 8);
}

TEST_CASE("trim frees the tail blocks and keeps the head") {
  block_manager m({.device_blocks = 8, .host_blocks = 0, .block_size = 4, .enable_prefix_caching = false});
  add_and_compute(m, 1, tokens_from(0, 14));
  const auto t = table_of(m, 1);
  CHECK(m.free_blocks(device) == 4);
  m.trim(1, 5);
  sane(m);
  CHECK(table_of(m, 1) == std::vector<std::int32_t>{t[0], t[1]});
  CHECK(m.free_blocks(device) == 6);
  m.trim(1, 8); // more than it holds: nothing to free
  sane(m);
  CHECK(m.block_table(1).size() == 2);
  m.trim(1, 0);
  sane(m);
  CHECK(m.block_table(1).empty());
  CHECK(m.free_blocks(device) == 8);
}

TEST_CASE("writing new tokens after a trim into an indexed block drops it from the index") {
  block_manager m({.device_blocks = 8, .host_blocks = 0, .block_size = 4});
  auto tokens = tokens_from(0, 9);
  add_and_compute(m, 1, tokens); // blocks [0..3] [4..7] indexed
  m.trim(1, 6);                  // speculative tokens 6.. rejected
  sane(m);
  tokens.resize(6);
  tokens.insert(tokens.end(), {70, 71, 72});
  const auto copies = m.grow(1, 9, 6);
  sane(m);
  REQUIRE(copies.has_value());
  CHECK(copies->empty()); // held alone: rewritten in place, so it must leave the index before the step writes
  CHECK(m.add_sequence(2, tokens_from(0, 9)) == 4); // while the step runs, the old second block is no hit
  sane(m);
  m.mark_computed(1, tokens, 9);
  sane(m);
  // The rewritten block [4, 5, 70, 71] is indexed again: [0..8] matches the first block whole and this one's
  // first two tokens (same prefix, same tokens), never the old [4, 5, 6, 7].
  CHECK(m.add_sequence(3, tokens_from(0, 9)) == 6);
  sane(m);
  CHECK(m.add_sequence(4, tokens) == 8); // the new one is cached
  sane(m);
}

TEST_CASE("stats count prefix queries and hits in tokens, no lookups without prefix caching") {
  block_manager m({.device_blocks = 16, .host_blocks = 0, .block_size = 4});
  add_and_compute(m, 1, tokens_from(0, 10));
  CHECK(m.stats().prefix_queries == 10);
  CHECK(m.stats().prefix_hits == 0);
  CHECK(m.add_sequence(2, tokens_from(0, 9)) == 8);
  sane(m);
  CHECK(m.stats().prefix_queries == 19);
  CHECK(m.stats().prefix_hits == 8);

  block_manager off({.device_blocks = 16, .host_blocks = 0, .block_size = 4, .enable_prefix_caching = false});
  add_and_compute(off, 1, tokens_from(0, 10));
  off.free_sequence(1);
  sane(off);
  CHECK(off.add_sequence(2, tokens_from(0, 10)) == 0);
  sane(off);
  CHECK(off.stats().prefix_queries == 0);
  CHECK(off.stats().prefix_hits == 0);
}

namespace {

// A model of the KV memory: each slot holds a fingerprint of the token prefix whose KV was written there, so a prefix
// hit or a shared block that carries another prefix's KV shows up as a wrong fingerprint.
struct kv_sim {
  struct seq_model {
    std::vector<token_id> tokens;
    int computed = 0;
    int release_floor = 0; // num_computed at the last release_before_window: a trim keeps at least that many
  };

  block_manager m;
  int bs;
  std::vector<std::uint64_t> device_mem, host_mem;
  std::map<seq_id, seq_model> seqs;
  std::mt19937 rng;
  seq_id next_id = 1;

  int window;

  kv_sim(block_manager_config cfg, troupe::runtime::block_hash_fn hash, unsigned seed)
      : m(cfg, hash),
        bs(cfg.block_size),
        window(cfg.sliding_window),
        device_mem(static_cast<std::size_t>(cfg.device_blocks) * bs, 0),
        host_mem(static_cast<std::size_t>(cfg.host_blocks) * bs, 0),
        rng(seed) {}

  int rand(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

  static std::uint64_t fingerprint(const std::vector<token_id>& t, int pos) {
    std::uint64_t f = 1469598103934665603ULL;
    for (int i = 0; i <= pos; ++i)
      f = (f ^ static_cast<std::uint32_t>(t[i])) * 1099511628211ULL;
    return f;
  }

  std::vector<std::uint64_t>& mem(kv_tier t) { return t == device ? device_mem : host_mem; }

  void run_copies(const std::vector<block_copy>& copies, kv_tier from, kv_tier to) {
    for (const auto& c : copies)
      std::copy_n(mem(from).begin() + c.src * bs, bs, mem(to).begin() + c.dst * bs);
  }

  seq_id pick(bool device_only = false) {
    std::vector<seq_id> ids;
    for (const auto& [id, s] : seqs)
      if (!device_only || m.tier_of(id) == device)
        ids.push_back(id);
    return ids.empty() ? 0 : ids[rand(0, static_cast<int>(ids.size()) - 1)];
  }

  // Every computed token of every sequence still finds its own prefix's KV where its table says (with a sliding
  // window, every token a later one can still see).
  void verify() {
    sane(m);
    for (const auto& [id, s] : seqs) {
      const auto table = m.block_table(id);
      REQUIRE(static_cast<int>(table.size()) * bs >= s.computed);
      const int visible = window > 0 ? std::max(0, s.release_floor - window + 1) : 0;
      REQUIRE(m.held_blocks(id) >= static_cast<int>(table.size()) - visible / bs);
      for (int p = visible; p < s.computed; ++p)
        REQUIRE(mem(m.tier_of(id))[table[p / bs] * bs + p % bs] == fingerprint(s.tokens, p));
    }
  }

  void add() {
    static const std::vector<token_id> bases[3] = {{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3},
                                                   {1, 2, 3, 3, 2, 1, 0, 0, 1, 1, 2, 2, 3, 3, 0, 1, 0, 1},
                                                   {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}};
    const auto& base = bases[rand(0, 2)];
    std::vector<token_id> prompt(base.begin(), base.begin() + rand(1, static_cast<int>(base.size())));
    for (int n = rand(0, 5); n > 0; --n)
      prompt.push_back(rand(0, 3));
    const seq_id id = next_id++;
    const int hits = m.add_sequence(id, prompt);
    REQUIRE(hits >= 0);
    REQUIRE(hits < static_cast<int>(prompt.size()));
    seqs[id] = {prompt, hits};
  }

  void step() {
    const seq_id id = pick(true);
    if (id == 0)
      return;
    auto& s = seqs[id];
    if (s.computed == static_cast<int>(s.tokens.size()))
      for (int n = rand(1, 5); n > 0; --n) // decode or speculative tokens
        s.tokens.push_back(rand(0, 3));
    const int target = std::min(static_cast<int>(s.tokens.size()), s.computed + rand(1, 12)); // chunked prefill
    const auto table_before = table_of(m, id);
    const int free_before = m.free_blocks(device);
    const bool fits = m.can_grow(id, target, s.computed);
    const auto copies = m.grow(id, target, s.computed);
    REQUIRE(fits == copies.has_value());
    if (!copies) {
      REQUIRE(table_of(m, id) == table_before);
      REQUIRE(m.free_blocks(device) == free_before);
      return;
    }
    run_copies(*copies, device, device);
    const auto table = m.block_table(id);
    for (int p = s.computed; p < target; ++p)
      device_mem[table[p / bs] * bs + p % bs] = fingerprint(s.tokens, p);
    m.mark_computed(id, s.tokens, target);
    s.computed = target;
    if (window > 0 && rand(0, 3) != 0) {
      const int held = m.held_blocks(id), free = m.free_blocks(device);
      const int given = m.release_before_window(id, target);
      REQUIRE(m.held_blocks(id) == held - given);
      REQUIRE(m.free_blocks(device) >= free);
      s.release_floor = target;
    }
  }

  void swap_out() {
    const seq_id id = pick(true);
    if (id == 0)
      return;
    const auto table_before = table_of(m, id);
    const int host_free = m.free_blocks(host), device_free = m.free_blocks(device);
    const auto copies = m.swap_out(id);
    if (!copies) {
      REQUIRE(m.tier_of(id) == device);
      REQUIRE(table_of(m, id) == table_before);
      REQUIRE(m.free_blocks(host) == host_free);
      REQUIRE(m.free_blocks(device) == device_free);
      return;
    }
    sane(m);
    run_copies(*copies, device, host);
    if (rand(0, 9) == 0) { // aborted while the copies ran
      m.free_sequence(id);
      seqs.erase(id);
      return;
    }
    m.commit_swap_out(id);
  }

  void swap_in() {
    std::vector<seq_id> on_host;
    for (const auto& [id, s] : seqs)
      if (m.tier_of(id) == host)
        on_host.push_back(id);
    if (on_host.empty())
      return;
    const seq_id id = on_host[rand(0, static_cast<int>(on_host.size()) - 1)];
    const bool fits = m.can_swap_in(id);
    const auto copies = m.swap_in(id);
    REQUIRE(fits == copies.has_value());
    if (!copies)
      return;
    sane(m);
    run_copies(*copies, host, device);
    if (rand(0, 9) == 0) {
      m.free_sequence(id);
      seqs.erase(id);
      return;
    }
    m.commit_swap_in(id);
  }

  void trim() {
    const seq_id id = pick();
    if (id == 0)
      return;
    auto& s = seqs[id];
    const int keep = rand(s.release_floor, s.computed); // speculative rollback never reaches a released window
    m.trim(id, keep);
    REQUIRE(static_cast<int>(m.block_table(id).size()) == (keep + bs - 1) / bs);
    s.tokens.resize(keep);
    s.computed = keep;
  }

  void fork() {
    const seq_id parent = pick();
    if (parent == 0)
      return;
    const seq_id child = next_id++;
    m.fork(parent, child);
    seqs[child] = seqs[parent];
  }

  void free_one() {
    const seq_id id = pick();
    if (id == 0)
      return;
    m.free_sequence(id);
    seqs.erase(id);
  }

  void mark_again() { // repeated or partial notifications change nothing wrong
    const seq_id id = pick(true);
    if (id != 0)
      m.mark_computed(id, seqs[id].tokens, rand(0, seqs[id].computed));
  }

  void run(int ops) {
    for (int i = 0; i < ops; ++i) {
      switch (rand(0, 9)) {
        case 0:
        case 1:
          if (seqs.size() < 10)
            add();
          break;
        case 2:
        case 3:
        case 4:
          step();
          break;
        case 5:
          free_one();
          break;
        case 6:
          swap_out();
          break;
        case 7:
          swap_in();
          break;
        case 8:
          rand(0, 1) ? trim() : mark_again();
          break;
        case 9:
          if (seqs.size() < 10)
            fork();
          break;
      }
      verify();
    }
    while (!seqs.empty())
      free_one();
    sane(m);
    CHECK(m.free_blocks(device) == m.total_blocks(device));
    CHECK(m.free_blocks(host) == m.total_blocks(host));
  }
};

} // namespace

TEST_CASE("2000 random operations keep the invariants and never hand a sequence another prefix's KV") {
  const block_manager_config cfg{.device_blocks = 24, .host_blocks = 16, .block_size = 4};
  SUBCASE("chained hash") {
    kv_sim sim(cfg, troupe::runtime::chained_block_hash, 1);
    sim.run(2000);
    CHECK(sim.m.stats().prefix_hits > 0);
    CHECK(sim.m.stats().cow_copies > 0);
    CHECK(sim.m.stats().swapped_in_blocks > 0);
    CHECK(sim.m.stats().swap_in_reused_blocks > 0); // reuse ran under the content checks
    CHECK(sim.m.stats().prefix_partial_hits > 0);   // and so did sharing partly filled blocks
    CHECK(sim.m.stats().evictions > 0);
  }
  SUBCASE("a hash blind to the parent block") {
    kv_sim sim(
        cfg, [](std::uint64_t, std::span<const token_id> t) { return troupe::runtime::chained_block_hash(0, t); }, 2);
    sim.run(2000);
  }
  SUBCASE("a hash where every block collides") {
    kv_sim sim(
        cfg, [](std::uint64_t, std::span<const token_id>) -> std::uint64_t { return 7; }, 3);
    sim.run(2000);
  }
  SUBCASE("prefix caching off") {
    auto off = cfg;
    off.enable_prefix_caching = false;
    kv_sim sim(off, troupe::runtime::chained_block_hash, 4);
    sim.run(2000);
    CHECK(sim.m.stats().prefix_hits == 0);
  }
  SUBCASE("a sliding window of 6 positions gives blocks back as sequences grow") {
    auto sliding = cfg;
    sliding.sliding_window = 6;
    kv_sim sim(sliding, troupe::runtime::chained_block_hash, 5);
    sim.run(2000);
    CHECK(sim.m.stats().window_released_blocks > 0);
    CHECK(sim.m.stats().prefix_hits > 0);
    CHECK(sim.m.stats().swapped_in_blocks > 0);
    CHECK(sim.m.stats().cow_copies > 0);
  }
  SUBCASE("a sliding window with prefix caching off") {
    auto sliding = cfg;
    sliding.sliding_window = 5;
    sliding.enable_prefix_caching = false;
    kv_sim sim(sliding, troupe::runtime::chained_block_hash, 6);
    sim.run(2000);
    CHECK(sim.m.stats().window_released_blocks > 0);
  }
}

TEST_CASE("a sliding window: blocks wholly before the next token's window go back, their entries read as block 0") {
  // Window 8, blocks of 4: after 20 tokens the next one (position 20) sees 13..20, so blocks 0-2 (positions 0-11)
  // go back and block 3 (12-15) stays.
  block_manager m({.device_blocks = 12, .host_blocks = 8, .block_size = 4, .sliding_window = 8});
  const auto prompt = tokens_from(100, 20);
  add_and_compute(m, 1, prompt);
  const auto before = table_of(m, 1);
  const int free_before = m.free_blocks(device);
  CHECK(m.release_before_window(1, 20) == 3);
  sane(m);
  auto table = table_of(m, 1);
  CHECK(table.size() == 5);
  CHECK(std::all_of(table.begin(), table.begin() + 3,
                    [](std::int32_t b) { return b == block_manager::released_block_entry; }));
  CHECK(std::equal(table.begin() + 3, table.end(), before.begin() + 3));
  CHECK(m.held_blocks(1) == 2);
  CHECK(m.free_blocks(device) == free_before + 3);
  CHECK(m.stats().window_released_blocks == 3);
  CHECK(m.release_before_window(1, 20) == 0); // nothing more to give
  CHECK(m.release_before_window(1, 22) == 0); // 15..22: block 3 still seen
  CHECK(m.release_before_window(1, 24) == 1); // 17..24: block 3 goes
  sane(m);

  // Indexed, the released blocks wait cached-free: the same prompt hits them while they last.
  CHECK(m.add_sequence(2, prompt) == 19);
  sane(m);
  m.free_sequence(2);

  // Grow on: the table keeps its released entries and appends.
  REQUIRE(m.grow(1, 30, 24).has_value());
  table = table_of(m, 1);
  CHECK(table.size() == 8);
  CHECK(table[0] == block_manager::released_block_entry);
  CHECK(m.held_blocks(1) == 4);
  sane(m);

  // A fork shares only the held blocks; a swap copies only them, both ways.
  m.fork(1, 3);
  sane(m);
  CHECK(table_of(m, 3) == table);
  CHECK(m.held_blocks(3) == 4);
  const auto out = m.swap_out(3);
  REQUIRE(out.has_value());
  CHECK(out->size() == 4);
  m.commit_swap_out(3);
  sane(m);
  CHECK(m.block_table(3).size() == 8);
  CHECK(m.held_blocks(3) == 4);
  const auto in = m.swap_in(3);
  REQUIRE(in.has_value());
  m.commit_swap_in(3);
  sane(m);
  CHECK(in->size() + m.stats().swap_in_reused_blocks == 4); // copied, or still on the device
  CHECK(table_of(m, 3)[3] == block_manager::released_block_entry);
  CHECK(m.held_blocks(3) == 4);

  // A trim of speculative tokens keeps the released entries; one into them is refused.
  m.trim(1, 26);
  sane(m);
  CHECK(m.held_blocks(1) == 3);
  CHECK_THROWS_AS(m.trim(1, 12), std::logic_error);
  sane(m);
  m.free_sequence(1);
  m.free_sequence(3);
  sane(m);
  CHECK(m.free_blocks(device) == m.total_blocks(device));
  CHECK(m.free_blocks(host) == m.total_blocks(host));
}

TEST_CASE("without a sliding window nothing is released") {
  block_manager m({.device_blocks = 12, .host_blocks = 0, .block_size = 4});
  add_and_compute(m, 1, tokens_from(0, 40 - 4 * 2));
  CHECK(m.release_before_window(1, 32) == 0);
  CHECK(m.held_blocks(1) == 8);
  CHECK_THROWS_AS(m.release_before_window(9, 32), std::logic_error);
  CHECK_THROWS_AS(m.release_before_window(1, -1), std::logic_error);
  sane(m);
}

TEST_CASE("misuse is a logic_error and changes nothing") {
  block_manager m({.device_blocks = 4, .host_blocks = 4, .block_size = 4});
  const std::vector<token_id> p = tokens_from(0, 5);
  add_and_compute(m, 1, p);
  CHECK_THROWS_AS(m.add_sequence(1, p), std::logic_error);
  sane(m);
  CHECK_THROWS_AS((void)m.grow(9, 4, 0), std::logic_error);
  CHECK_THROWS_AS(m.can_grow(9, 4, 0), std::logic_error);
  CHECK_THROWS_AS((void)m.grow(1, -1, 0), std::logic_error);
  CHECK_THROWS_AS(m.mark_computed(9, p, 1), std::logic_error);
  CHECK_THROWS_AS(m.mark_computed(1, p, 6), std::logic_error); // more than the tokens given
  CHECK_THROWS_AS(m.free_sequence(9), std::logic_error);
  CHECK_THROWS_AS(m.trim(9, 0), std::logic_error);
  CHECK_THROWS_AS(m.fork(9, 10), std::logic_error);
  CHECK_THROWS_AS(m.fork(1, 1), std::logic_error);
  CHECK_THROWS_AS((void)m.swap_out(9), std::logic_error);
  CHECK_THROWS_AS(m.commit_swap_out(1), std::logic_error); // no swap in flight
  CHECK_THROWS_AS((void)m.swap_in(1), std::logic_error);   // already on the device
  CHECK_THROWS_AS(m.can_swap_in(1), std::logic_error);
  CHECK_THROWS_AS(m.commit_swap_in(1), std::logic_error);
  CHECK_THROWS_AS(m.tier_of(9), std::logic_error);
  CHECK_THROWS_AS(m.block_table(9), std::logic_error);
  sane(m);

  REQUIRE(m.swap_out(1).has_value());
  CHECK_THROWS_AS((void)m.grow(1, 8, 5), std::logic_error); // swap in flight
  CHECK_THROWS_AS(m.trim(1, 0), std::logic_error);
  CHECK_THROWS_AS(m.fork(1, 2), std::logic_error);
  sane(m);
  m.commit_swap_out(1);
  sane(m);
  CHECK_THROWS_AS((void)m.grow(1, 8, 5), std::logic_error); // on the host
  CHECK_THROWS_AS(m.mark_computed(1, p, 5), std::logic_error);
  CHECK_THROWS_AS((void)m.swap_out(1), std::logic_error);
  sane(m);
  CHECK(m.tier_of(1) == host);
  CHECK(m.block_table(1).size() == 2);

  CHECK_THROWS_AS(block_manager({.device_blocks = 4, .host_blocks = 0, .block_size = 0}), std::logic_error);
  CHECK_THROWS_AS(block_manager({.device_blocks = -1, .host_blocks = 0, .block_size = 4}), std::logic_error);
}
