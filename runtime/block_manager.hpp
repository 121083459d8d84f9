// Bookkeeping of the paged KV cache (the executor owns the memory): block ids per sequence in a device and a host tier,
// a prefix cache of full blocks keyed by a chained hash, copy-on-write and swapping.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/kv_geometry.hpp"
#include "runtime/step_batch.hpp"

namespace troupe::runtime {

using seq_id = std::uint64_t;

enum class kv_tier { device, host };

// One block-to-block copy; which tiers src and dst live in is implied by the call that returned it.
struct block_copy {
  std::int32_t src;
  std::int32_t dst;
  friend bool operator==(const block_copy&, const block_copy&) = default;
};

struct block_manager_config {
  int device_blocks;
  int host_blocks;
  int block_size; // tokens per block
  bool enable_prefix_caching = true;
  // > 0: every layer of the model attends to at most this many positions (sliding-window attention), so the
  // blocks before a sequence's window can go back (release_before_window). 0: full attention somewhere.
  int sliding_window = 0;
};

struct block_manager_stats {
  std::uint64_t prefix_queries = 0, prefix_hits = 0; // in tokens: tokens looked up / tokens found cached
  std::uint64_t cow_copies = 0, swapped_out_blocks = 0, swapped_in_blocks = 0, evictions = 0;
  std::uint64_t swap_in_reused_blocks = 0;  // swapped-in blocks whose content was still on the device (not copied)
  std::uint64_t prefix_partial_hits = 0;    // of prefix_hits, tokens found in another sequence's partly filled block
  std::uint64_t window_released_blocks = 0; // blocks given back out of a sliding window
};

// hash(parent block's hash, this block's token ids). Injectable so a test can force collisions.
using block_hash_fn = std::uint64_t (*)(std::uint64_t parent_hash, std::span<const token_id> block_tokens);
std::uint64_t chained_block_hash(std::uint64_t parent_hash, std::span<const token_id> block_tokens);

class block_manager {
 public:
  explicit block_manager(block_manager_config cfg, block_hash_fn hash = chained_block_hash);

  // A new sequence. With prefix caching, takes a reference on the longest chain of cached full device blocks that
  // matches `prompt` and returns how many prompt tokens already have their KV (at most prompt.size() - 1: the last
  // token is always computed, its logits are needed). Allocates nothing new.
  // After the full blocks, the prompt may also match the first tokens of a block computed after the same prefix: an
  // indexed full block, or one a live sequence is filling (a shared system prompt that ends inside a block, followed
  // by another request's own turn). The new sequence then shares that block too, its matching tokens count as hits,
  // and its first grow() copies the block before writing into it if another table holds it (copy-on-write). With
  // large blocks this saves recomputing up to block_size - 1 prompt tokens per request.
  int add_sequence(seq_id id, std::span<const token_id> prompt);

  // What add_sequence would return for `prompt` now, changing nothing (no references, no stats): the scheduler
  // budgets a waiting prompt's step by the tokens it must compute, not by those the cache already holds.
  int cached_prefix_tokens(std::span<const token_id> prompt) const;

  // Would grow(id, total_tokens, first_write_pos) succeed? (Same arguments: the copy-on-write need depends on where
  // the step starts writing.)
  bool can_grow(seq_id id, int total_tokens, int first_write_pos) const;

  // Grows the device block table to hold total_tokens, taking free blocks first, then evicting the least recently
  // freed cached blocks. The step will write positions [first_write_pos, total_tokens); a block there that another
  // table also holds is first copied to a fresh block (copy-on-write), and the returned device->device copies must run
  // before the step writes. A block held alone is written in place: recomputing a cached prompt's last token rewrites
  // the same KV, while a write after trim() changes it, so such a block leaves the prefix index first.
  // nullopt (nothing changed) when device blocks are short.
  [[nodiscard]] std::optional<std::vector<block_copy>> grow(seq_id id, int total_tokens, int first_write_pos);

  // The KV of tokens[0, num_computed) is in the cache: the full blocks in that range enter the prefix index.
  void mark_computed(seq_id id, std::span<const token_id> tokens, int num_computed);

  // Sliding window (config.sliding_window W > 0): the sequence holds the KV of its first num_computed tokens, so its
  // next token, at position num_computed, and every later one attend only to positions num_computed - W + 1 on. Its
  // device blocks wholly before that go back: held by no other table, they become cached-free when indexed (a later
  // prompt with the same prefix may still hit them) or free. Their entries stay in the table as
  // released_block_entry, an id the kernels may address for masked positions but whose contents never count (the
  // pool is zeroed when made, and every block after holds finite KV). A swap copies only the held blocks; fork,
  // trim and free skip the released ones. num_computed must never later fall below what it was here (a trim is
  // only ever of speculative tokens past it). Returns the number of blocks given back.
  int release_before_window(seq_id id, int num_computed);
  static constexpr std::int32_t released_block_entry = 0;

  // Drops the sequence. Its blocks that no other table holds become cached-free (if indexed: reusable by a later
  // prefix hit, evicted least recently freed first) or free.
  void free_sequence(seq_id id);

  // Keeps only the blocks that hold the first num_tokens tokens (speculative-decoding rollback).
  void trim(seq_id id, int num_tokens);

  // The child shares every block of the parent (same tier); whichever writes first into a shared block copies it.
  void fork(seq_id parent, seq_id child);

  // Swap out: reserves one host block per device block and returns the device->host copies; commit_swap_out (after
  // the copies ran) releases the device blocks. Every block is copied, also one shared with another sequence: the
  // swapped sequence gets its own host copy and the sharer keeps the device block. nullopt (nothing changed) when
  // host blocks are short. Until the commit the sequence stays on the device and can only be freed.
  [[nodiscard]] std::optional<std::vector<block_copy>> swap_out(seq_id id);
  void commit_swap_out(seq_id id);
  // Swap in: the mirror (host->device copies; nullopt when device blocks are short); commit_swap_in frees the host
  // blocks. A full block whose exact content (same tokens after the same prefix) is still indexed on the device, e.g.
  // a system prompt that other sequences share or that waits cached-free, is not copied: the sequence takes a
  // reference on that device block. Only the other blocks are copied and count against the free device blocks.
  [[nodiscard]] std::optional<std::vector<block_copy>> swap_in(seq_id id);
  void commit_swap_in(seq_id id);
  bool can_swap_in(seq_id id) const;

  kv_tier tier_of(seq_id id) const;
  std::span<const std::int32_t> block_table(seq_id id) const; // the current tier's block ids, in order
  int held_blocks(seq_id id) const; // of block_table(id): those not released by release_before_window
  bool contains(seq_id id) const;
  int free_blocks(kv_tier t) const; // free + evictable cached-free
  int total_blocks(kv_tier t) const;
  int block_size() const { return cfg_.block_size; }
  const block_manager_stats& stats() const { return stats_; }

  // Throws std::logic_error naming the first broken invariant. Scans everything: for tests and debug builds.
  void check_invariants() const;

 private:
  // free: in the free list. in_use: held by >= 1 table. cached: held by none but indexed, waiting in the LRU.
  enum class block_state : std::uint8_t { free, in_use, cached };

  struct pool {
    std::vector<int> refcount; // number of tables (including in-flight swap targets) holding the block
    std::vector<block_state> state;
    std::vector<std::int32_t> free_list; // a stack: the most recently freed block is reused first
  };

  // Prefix-index metadata of one device block (meaningful while `indexed`). `serial` names this exact content in
  // this exact position of this exact prefix; a child records its parent's serial, so a match needs equal tokens and
  // the very parent just matched, not merely an equal hash.
  struct index_entry {
    bool indexed = false;
    std::uint64_t hash = 0, parent_hash = 0;
    std::uint64_t serial = 0, parent_serial = 0;
    std::int32_t lru_prev = -1, lru_next = -1; // links of the intrusive LRU list while the block is cached
  };

  // What the leading full blocks of a sequence hold, as prefix-index identities.
  struct chain_link {
    std::uint64_t hash;
    std::uint64_t serial;
  };

  enum class pending_swap : std::uint8_t { none, out, in };

  struct sequence {
    kv_tier tier = kv_tier::device;
    std::vector<std::int32_t> table;
    // Links for table[0, chain.size()): full blocks whose content is known to equal an indexed content (the block
    // itself, or an equal one elsewhere). Lets mark_computed continue the chain without rehashing it.
    std::vector<chain_link> chain;
    pending_swap pending = pending_swap::none;
    std::vector<std::int32_t> pending_table; // the other tier's blocks while a swap is in flight
    int pending_reused = 0;                  // of a swap-in's pending_table: device blocks taken as they were
    std::int32_t partial_block = -1;         // its partly filled block while it is in partial_ (see mark_computed)
    // Table index of a block shared by a partial prefix hit. If that block is indexed when this sequence first
    // writes into it, the write goes to a copy even when no other table holds it: the indexed content stays cached.
    int copy_before_write = -1;
    // table[0, released): blocks given back by release_before_window (entries released_block_entry); the chain may
    // still name their contents.
    int released = 0;
    std::span<const std::int32_t> held() const { return std::span(table).subspan(static_cast<std::size_t>(released)); }
  };
  // Must the write into s.table[b] go to a fresh copy? (Another table holds it, or it is an indexed block this
  // sequence shares only in part.)
  bool copies_on_write(const sequence& s, int b) const;

  // A device block its owner has partly filled after a known prefix: the first `length` tokens (in indexed_tokens_)
  // follow the content named by parent_serial. A later prompt with that prefix and those tokens may share it.
  struct partial_entry {
    seq_id owner;
    std::uint64_t parent_serial;
    int length; // 2 .. block_size - 1
  };
  // A block's place among candidates for a partial hit: its parent's serial and its first two tokens. A hit needs
  // two shared tokens (one saves less than the block copy it costs), and keying by them keeps the candidates few
  // where many blocks follow one prefix (every first block follows the root; after a system prompt, every request's
  // next block does). tokens: at least 2.
  static std::uint64_t start_key(std::uint64_t parent_serial, std::span<const token_id> tokens);
  // The block after parent_serial (indexed, or partly filled) whose tokens share the longest run, of at least 2,
  // with `rest` (at most `most` tokens); {-1, 0} when there is none.
  std::pair<std::int32_t, int> match_partial(std::uint64_t parent_serial, std::span<const token_id> rest,
                                             int most) const;
  void forget_partial(seq_id id, sequence& s); // drops s's entry (its table is about to change)

  // Where a host sequence's blocks would come from on swap-in: per table entry, the device block already holding its
  // content, or -1 (copy from the host). copies: entries at -1; revived: resident blocks now cached-free, which stop
  // counting as free once referenced.
  struct swap_in_plan {
    std::vector<std::int32_t> resident;
    int copies = 0, revived = 0;
  };
  swap_in_plan plan_swap_in(const sequence& s) const;

  static constexpr std::uint64_t root_hash = 0x6a09e667f3bcc908ULL; // parent hash of a prompt's first block
  static constexpr std::uint64_t root_serial = 0;

  sequence& get(seq_id id, const char* what);
  const sequence& get(seq_id id, const char* what) const;
  sequence& get_idle_device(seq_id id, const char* what);
  pool& pool_of(kv_tier t) { return t == kv_tier::device ? device_ : host_; }
  const pool& pool_of(kv_tier t) const { return t == kv_tier::device ? device_ : host_; }
  std::span<const token_id> tokens_of(std::int32_t block) const;
  int blocks_for(int tokens) const { return blocks_for_tokens(tokens, cfg_.block_size); }
  int blocks_needed_to_grow(const sequence& s, int total_tokens, int first_write_pos) const;

  std::int32_t take_block(kv_tier t); // from the free list, else by evicting the LRU cached block (device)
  void add_ref(kv_tier t, std::int32_t block);
  void drop_ref(kv_tier t, std::int32_t block);
  void drop_refs(kv_tier t, std::span<const std::int32_t> blocks); // back to front: tail blocks age first
  void lru_push_back(std::int32_t block);
  void lru_remove(std::int32_t block);
  void index_block(std::int32_t block, std::uint64_t hash, std::uint64_t parent_hash, std::uint64_t parent_serial,
                   std::span<const token_id> tokens);
  void unindex_block(std::int32_t block);
  // The longest chain of indexed full blocks matching the prompt's leading blocks.
  struct prefix_match {
    std::vector<std::int32_t> blocks;
    std::vector<chain_link> chain;
    std::int32_t partial = -1; // then a partly filled block sharing the prompt's next partial_tokens tokens
    int partial_tokens = 0;
  };
  prefix_match match_prefix(std::span<const token_id> prompt) const;
  // The indexed block holding `tokens` right after the prefix named by parent_serial, or -1.
  std::int32_t lookup(std::uint64_t hash, std::uint64_t parent_serial, std::span<const token_id> tokens) const;

  block_manager_config cfg_;
  block_hash_fn hash_;
  pool device_, host_;
  std::vector<index_entry> meta_;        // [device_blocks]
  std::vector<token_id> indexed_tokens_; // [device_blocks * block_size] token ids of each indexed block
  std::unordered_map<std::uint64_t, std::int32_t> index_;   // chained hash -> device block
  std::unordered_map<std::int32_t, partial_entry> partial_; // device block -> what it partly holds
  // Blocks a prompt may share in part, by start_key: partly filled ones (of partial_) and indexed full ones.
  std::unordered_multimap<std::uint64_t, std::int32_t> partial_by_start_;
  std::unordered_multimap<std::uint64_t, std::int32_t> indexed_by_start_;
  // Cached device blocks, least recently freed at the head. Intrusive (links in meta_), so no allocation per free.
  std::int32_t lru_head_ = -1, lru_tail_ = -1;
  int lru_size_ = 0;
  std::uint64_t next_serial_ = 1;
  std::unordered_map<seq_id, sequence> seqs_;
  block_manager_stats stats_;
};

} // namespace troupe::runtime
