// The paged KV cache's bookkeeping: free lists and refcounts per tier, the chained-hash prefix index with its LRU of
// cached-free blocks, copy-on-write, and the two-step swap between the device and host tiers.
#include "runtime/block_manager.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace troupe::runtime {

namespace {

// splitmix64's finalizer: every input bit flips about half the output bits.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

[[noreturn]] void misuse(const char* call, seq_id id, const char* why) {
  throw std::logic_error(std::string("block_manager::") + call + ": sequence " + std::to_string(id) + " " + why);
}

kv_tier other(kv_tier t) {
  return t == kv_tier::device ? kv_tier::host : kv_tier::device;
}

// The lists of blocks by start key hold each block once under its key.
using block_lists = std::unordered_multimap<std::uint64_t, std::int32_t>;

void unlist(block_lists& lists, std::uint64_t key, std::int32_t block) {
  const auto [first, last] = lists.equal_range(key);
  for (auto it = first; it != last; ++it)
    if (it->second == block) {
      lists.erase(it);
      return;
    }
}

bool listed_once(const block_lists& lists, std::uint64_t key, std::int32_t block) {
  const auto [first, last] = lists.equal_range(key);
  return std::count_if(first, last, [block](const auto& kv) { return kv.second == block; }) == 1;
}

} // namespace

std::uint64_t chained_block_hash(std::uint64_t parent_hash, std::span<const token_id> block_tokens) {
  std::uint64_t h = mix(parent_hash);
  for (token_id t : block_tokens)
    h = mix(h ^ static_cast<std::uint32_t>(t));
  return mix(h ^ block_tokens.size());
}

block_manager::block_manager(block_manager_config cfg, block_hash_fn hash) : cfg_(cfg), hash_(hash) {
  if (cfg.device_blocks < 0 || cfg.host_blocks < 0 || cfg.block_size <= 0 || hash == nullptr)
    throw std::invalid_argument("block_manager: block counts must be >= 0, block_size > 0 and the hash set");
  for (auto [p, n] : {std::pair{&device_, cfg.device_blocks}, std::pair{&host_, cfg.host_blocks}}) {
    p->refcount.assign(n, 0);
    p->state.assign(n, block_state::free);
    p->free_list.reserve(n);
    for (std::int32_t b = n - 1; b >= 0; --b) // block 0 on top: handed out first
      p->free_list.push_back(b);
  }
  meta_.resize(cfg.device_blocks);
  indexed_tokens_.resize(static_cast<std::size_t>(cfg.device_blocks) * cfg.block_size);
  index_.reserve(cfg.device_blocks);
}

// ---- sequences -------------------------------------------------------------------------------------------------

block_manager::prefix_match block_manager::match_prefix(std::span<const token_id> prompt) const {
  prefix_match m;
  // Walk the prompt block by block while the chain of full blocks is cached.
  const std::size_t bs = cfg_.block_size;
  std::uint64_t parent_hash = root_hash, parent_serial = root_serial;
  for (std::size_t start = 0; start + bs <= prompt.size(); start += bs) {
    const auto tokens = prompt.subspan(start, bs);
    const std::uint64_t h = hash_(parent_hash, tokens);
    const std::int32_t b = lookup(h, parent_serial, tokens);
    if (b < 0)
      break;
    m.blocks.push_back(b);
    m.chain.push_back({h, meta_[b].serial});
    parent_hash = h;
    parent_serial = meta_[b].serial;
  }
  // Then a partly filled block after the same prefix, if the prompt leaves a token to compute after it.
  const std::size_t done = m.blocks.size() * bs;
  if (done + 1 < prompt.size()) {
    const int most = static_cast<int>(std::min(bs - 1, prompt.size() - 1 - done));
    std::tie(m.partial, m.partial_tokens) = match_partial(parent_serial, prompt.subspan(done), most);
  }
  return m;
}

std::uint64_t block_manager::start_key(std::uint64_t parent_serial, std::span<const token_id> tokens) {
  return mix(mix(parent_serial) ^ (static_cast<std::uint64_t>(static_cast<std::uint32_t>(tokens[0])) << 32 |
                                   static_cast<std::uint32_t>(tokens[1])));
}

std::pair<std::int32_t, int> block_manager::match_partial(std::uint64_t parent_serial, std::span<const token_id> rest,
                                                          int most) const {
  std::pair<std::int32_t, int> best{-1, 0};
  if (rest.size() < 2 || most < 2)
    return best;
  auto consider = [&](std::int32_t b, std::uint64_t block_parent, std::size_t length) {
    if (block_parent != parent_serial) // another prefix whose key collides
      return;
    const auto held = tokens_of(b).first(length);
    const std::size_t limit = std::min({held.size(), rest.size(), static_cast<std::size_t>(most)});
    const auto end = held.begin() + static_cast<std::ptrdiff_t>(limit);
    const int shared = static_cast<int>(std::mismatch(held.begin(), end, rest.begin()).first - held.begin());
    if (shared >= 2 && shared > best.second)
      best = {b, shared};
  };
  const std::uint64_t key = start_key(parent_serial, rest);
  const auto [pf, pl] = partial_by_start_.equal_range(key);
  for (auto it = pf; it != pl; ++it) {
    const partial_entry& e = partial_.at(it->second);
    consider(it->second, e.parent_serial, static_cast<std::size_t>(e.length));
  }
  const auto [cf, cl] = indexed_by_start_.equal_range(key);
  for (auto it = cf; it != cl; ++it)
    consider(it->second, meta_[it->second].parent_serial, static_cast<std::size_t>(cfg_.block_size));
  return best;
}

void block_manager::forget_partial(seq_id id, sequence& s) {
  if (s.partial_block < 0)
    return;
  const std::int32_t block = std::exchange(s.partial_block, -1);
  const auto it = partial_.find(block);
  if (it == partial_.end() || it->second.owner != id)
    throw std::logic_error("block_manager: a sequence's partial block entry is missing or not its own");
  unlist(partial_by_start_, start_key(it->second.parent_serial, tokens_of(block)), block);
  partial_.erase(it);
}

namespace {
// The last prompt token is recomputed even when cached: its logits pick the first output token.
int usable_hits(std::size_t matched_blocks, std::size_t block_size, std::size_t prompt_size) {
  return static_cast<int>(std::min(matched_blocks * block_size, prompt_size == 0 ? 0 : prompt_size - 1));
}
} // namespace

int block_manager::cached_prefix_tokens(std::span<const token_id> prompt) const {
  if (!cfg_.enable_prefix_caching)
    return 0;
  const prefix_match m = match_prefix(prompt);
  return usable_hits(m.blocks.size(), cfg_.block_size, prompt.size()) + m.partial_tokens;
}

int block_manager::add_sequence(seq_id id, std::span<const token_id> prompt) {
  if (seqs_.contains(id))
    misuse("add_sequence", id, "already exists");
  sequence s;
  int hits = 0;
  if (cfg_.enable_prefix_caching) {
    auto m = match_prefix(prompt);
    for (auto b : m.blocks)
      add_ref(kv_tier::device, b);
    // If the last prompt token sits in a matched block, that block stays in the table and
    // grow() decides whether the write needs a copy.
    hits = usable_hits(m.blocks.size(), cfg_.block_size, prompt.size());
    s.table = std::move(m.blocks);
    s.chain = std::move(m.chain);
    if (m.partial >= 0) { // shared like a forked block: the first write into it copies it
      add_ref(kv_tier::device, m.partial);
      s.copy_before_write = static_cast<int>(s.table.size());
      s.table.push_back(m.partial);
      hits += m.partial_tokens;
      stats_.prefix_partial_hits += m.partial_tokens;
    }
    stats_.prefix_queries += prompt.size();
    stats_.prefix_hits += hits;
  }
  seqs_.emplace(id, std::move(s));
  return hits;
}

bool block_manager::copies_on_write(const sequence& s, int b) const {
  const std::int32_t block = s.table[b];
  return device_.refcount[block] > 1 || (b == s.copy_before_write && meta_[block].indexed);
}

int block_manager::blocks_needed_to_grow(const sequence& s, int total_tokens, int first_write_pos) const {
  int needed = std::max(0, blocks_for(total_tokens) - static_cast<int>(s.table.size()));
  if (total_tokens > first_write_pos) {
    const int end = std::min(static_cast<int>(s.table.size()), blocks_for(total_tokens));
    for (int b = first_write_pos / cfg_.block_size; b < end; ++b)
      if (copies_on_write(s, b))
        ++needed;
  }
  return needed;
}

bool block_manager::can_grow(seq_id id, int total_tokens, int first_write_pos) const {
  const sequence& s = get(id, "can_grow");
  if (s.tier != kv_tier::device || s.pending != pending_swap::none)
    misuse("can_grow", id, "is not idle on the device");
  if (total_tokens < 0 || first_write_pos < 0)
    misuse("can_grow", id, "was given a negative token count");
  return blocks_needed_to_grow(s, total_tokens, first_write_pos) <= free_blocks(kv_tier::device);
}

std::optional<std::vector<block_copy>> block_manager::grow(seq_id id, int total_tokens, int first_write_pos) {
  sequence& s = get_idle_device(id, "grow");
  if (total_tokens < 0 || first_write_pos < 0)
    misuse("grow", id, "was given a negative token count");
  if (blocks_needed_to_grow(s, total_tokens, first_write_pos) > free_blocks(kv_tier::device))
    return std::nullopt;
  forget_partial(id, s); // the step writes: mark_computed offers the block again afterwards

  std::vector<block_copy> copies;
  if (total_tokens > first_write_pos) {
    const int end = std::min(static_cast<int>(s.table.size()), blocks_for(total_tokens));
    for (int b = first_write_pos / cfg_.block_size; b < end; ++b) {
      std::int32_t& block = s.table[b];
      if (copies_on_write(s, b)) {
        // Another table reads this block (or the prefix index does): this sequence writes into its own copy. The
        // old block keeps its holders (or returns to the cached-free LRU) and is not overwritten.
        if (b == s.copy_before_write)
          s.copy_before_write = -1;
        const std::int32_t fresh = take_block(kv_tier::device);
        copies.push_back({block, fresh});
        drop_ref(kv_tier::device, block);
        block = fresh;
        ++stats_.cow_copies;
      } else if (meta_[block].indexed && b >= static_cast<int>(s.chain.size())) {
        // Ours alone, but the index describes tokens this write replaces (the table was trimmed into the block).
        // Inside the chain the write only recomputes the same tokens, so the indexed content stays true.
        unindex_block(block);
      }
    }
  }
  while (static_cast<int>(s.table.size()) < blocks_for(total_tokens))
    s.table.push_back(take_block(kv_tier::device));
  return copies;
}

void block_manager::mark_computed(seq_id id, std::span<const token_id> tokens, int num_computed) {
  sequence& s = get_idle_device(id, "mark_computed");
  const std::size_t bs = cfg_.block_size;
  if (num_computed < 0 || static_cast<std::size_t>(num_computed) > tokens.size() ||
      static_cast<std::size_t>(num_computed) > s.table.size() * bs)
    misuse("mark_computed", id, "was given more computed tokens than it has tokens or blocks");
  if (!cfg_.enable_prefix_caching)
    return;
  forget_partial(id, s);
  // Extend the chain over the newly completed full blocks; earlier ones are already linked.
  const std::size_t full_blocks = num_computed / bs;
  while (s.chain.size() < full_blocks) {
    const std::size_t b = s.chain.size();
    if (b < static_cast<std::size_t>(s.released))
      break; // given back before it was linked: the chain cannot go on past it (only after a swap-in)
    const auto block_tokens = tokens.subspan(b * bs, bs);
    const std::uint64_t parent_hash = b == 0 ? root_hash : s.chain.back().hash;
    const std::uint64_t parent_serial = b == 0 ? root_serial : s.chain.back().serial;
    const std::uint64_t h = hash_(parent_hash, block_tokens);
    std::int32_t holder = lookup(h, parent_serial, block_tokens);
    if (holder < 0) {
      // New content. Whatever holds the hash now is stale (its parent was evicted) or a collision: the newer entry
      // wins. Our block may still be indexed with the tokens it held before a trim.
      const std::int32_t mine = s.table[b];
      if (meta_[mine].indexed)
        unindex_block(mine);
      if (const auto it = index_.find(h); it != index_.end())
        unindex_block(it->second);
      index_block(mine, h, parent_hash, parent_serial, block_tokens);
      holder = mine;
    }
    // else: the same content is indexed already (maybe in another block, computed twice): link to that one.
    s.chain.push_back({h, meta_[holder].serial});
  }
  // The block being filled, after a linked chain: later prompts with this prefix may share its computed tokens.
  const std::size_t length = num_computed % bs;
  if (length >= 2 && s.chain.size() == full_blocks) {
    const std::int32_t b = s.table[full_blocks];
    // Not an indexed block (its slot in indexed_tokens_ describes the indexed content), nor one that another
    // sequence already offers (shared with it, this one has not written into it).
    if (!meta_[b].indexed && !partial_.contains(b)) {
      const std::uint64_t parent_serial = full_blocks == 0 ? root_serial : s.chain.back().serial;
      std::ranges::copy(tokens.subspan(full_blocks * bs, length),
                        indexed_tokens_.begin() + static_cast<std::ptrdiff_t>(b) * cfg_.block_size);
      partial_[b] = {id, parent_serial, static_cast<int>(length)};
      partial_by_start_.emplace(start_key(parent_serial, tokens_of(b)), b);
      s.partial_block = b;
    }
  }
}

void block_manager::free_sequence(seq_id id) {
  const auto it = seqs_.find(id);
  if (it == seqs_.end())
    misuse("free_sequence", id, "is unknown");
  sequence& s = it->second;
  forget_partial(id, s);
  drop_refs(s.tier, s.held());
  if (s.pending != pending_swap::none) // a swap was in flight: its reserved blocks go back too
    drop_refs(other(s.tier), std::span(s.pending_table).subspan(static_cast<std::size_t>(s.released)));
  seqs_.erase(it);
}

int block_manager::release_before_window(seq_id id, int num_computed) {
  sequence& s = get_idle_device(id, "release_before_window");
  if (num_computed < 0)
    misuse("release_before_window", id, "was given a negative token count");
  if (cfg_.sliding_window <= 0)
    return 0;
  // Block b holds positions [b * bs, (b + 1) * bs): out of every later window when (b + 1) * bs <= first_needed.
  const int first_needed = num_computed - cfg_.sliding_window + 1;
  const int end = std::min(static_cast<int>(s.table.size()), std::max(0, first_needed) / cfg_.block_size);
  if (end <= s.released)
    return 0;
  if (s.partial_block >= 0 &&
      std::find(s.table.begin() + s.released, s.table.begin() + end, s.partial_block) != s.table.begin() + end)
    forget_partial(id, s);
  const int given = end - s.released;
  drop_refs(kv_tier::device,
            std::span(s.table).subspan(static_cast<std::size_t>(s.released), static_cast<std::size_t>(given)));
  std::fill(s.table.begin() + s.released, s.table.begin() + end, released_block_entry);
  if (s.copy_before_write >= 0 && s.copy_before_write < end)
    s.copy_before_write = -1;
  s.released = end;
  stats_.window_released_blocks += static_cast<std::uint64_t>(given);
  return given;
}

void block_manager::trim(seq_id id, int num_tokens) {
  sequence& s = get(id, "trim");
  if (s.pending != pending_swap::none)
    misuse("trim", id, "has a swap in flight");
  if (num_tokens < 0)
    misuse("trim", id, "was given a negative token count");
  forget_partial(id, s);
  const auto keep = static_cast<std::size_t>(blocks_for(num_tokens));
  if (keep < static_cast<std::size_t>(s.released))
    misuse("trim", id, "would cut into blocks given back outside the sliding window");
  if (s.copy_before_write >= static_cast<int>(keep))
    s.copy_before_write = -1;
  if (keep < s.table.size()) {
    drop_refs(s.tier, std::span(s.table).subspan(keep));
    s.table.resize(keep);
  }
  // A kept partial block will be overwritten: it no longer belongs to the chain (see grow).
  s.chain.resize(std::min(s.chain.size(), static_cast<std::size_t>(num_tokens / cfg_.block_size)));
}

void block_manager::fork(seq_id parent, seq_id child) {
  const sequence& p = get(parent, "fork");
  if (p.pending != pending_swap::none)
    misuse("fork", parent, "has a swap in flight");
  if (seqs_.contains(child))
    misuse("fork", child, "already exists");
  sequence c;
  c.tier = p.tier;
  c.table = p.table;
  c.chain = p.chain;
  c.copy_before_write = p.copy_before_write;
  c.released = p.released;
  for (std::int32_t b : c.held())
    add_ref(c.tier, b);
  seqs_.emplace(child, std::move(c));
}

// ---- swapping ------------------------------------------------------------------------------------------------------

std::optional<std::vector<block_copy>> block_manager::swap_out(seq_id id) {
  sequence& s = get_idle_device(id, "swap_out");
  if (host_.free_list.size() < s.held().size())
    return std::nullopt;
  forget_partial(id, s); // its device blocks go once the copies ran
  std::vector<block_copy> copies;
  copies.reserve(s.held().size());
  s.pending_table.assign(static_cast<std::size_t>(s.released), released_block_entry);
  for (std::int32_t b : s.held()) {
    const std::int32_t h = take_block(kv_tier::host);
    s.pending_table.push_back(h);
    copies.push_back({b, h});
  }
  s.pending = pending_swap::out;
  return copies;
}

void block_manager::commit_swap_out(seq_id id) {
  sequence& s = get(id, "commit_swap_out");
  if (s.pending != pending_swap::out)
    misuse("commit_swap_out", id, "has no swap-out in flight");
  // Indexed device blocks become cached-free: their content is still valid for later prefix hits.
  drop_refs(kv_tier::device, s.held());
  s.copy_before_write = -1; // its host copy is its own
  stats_.swapped_out_blocks += s.held().size();
  std::swap(s.table, s.pending_table);
  s.pending_table.clear();
  s.tier = kv_tier::host;
  s.pending = pending_swap::none;
}

block_manager::swap_in_plan block_manager::plan_swap_in(const sequence& s) const {
  swap_in_plan plan;
  plan.resident.assign(s.table.size(), -1);
  // Released entries stay released: nothing is copied for them or held.
  std::fill_n(plan.resident.begin(), s.released, released_block_entry);
  // The chain names each leading full block's content by its serial, which no other content ever gets: a device
  // block indexed under that hash with that serial holds exactly these tokens after exactly this prefix.
  if (cfg_.enable_prefix_caching)
    for (std::size_t i = static_cast<std::size_t>(s.released); i < s.chain.size(); ++i)
      if (const auto it = index_.find(s.chain[i].hash);
          it != index_.end() && meta_[it->second].indexed && meta_[it->second].serial == s.chain[i].serial) {
        plan.resident[i] = it->second;
        if (device_.state[it->second] == block_state::cached)
          ++plan.revived;
      }
  plan.copies = static_cast<int>(std::count(plan.resident.begin(), plan.resident.end(), -1));
  return plan;
}

std::optional<std::vector<block_copy>> block_manager::swap_in(seq_id id) {
  sequence& s = get(id, "swap_in");
  if (s.tier != kv_tier::host || s.pending != pending_swap::none)
    misuse("swap_in", id, "is not idle on the host");
  const swap_in_plan plan = plan_swap_in(s);
  if (free_blocks(kv_tier::device) - plan.revived < plan.copies)
    return std::nullopt;
  // References on the resident blocks first, so that taking the others cannot evict them.
  s.pending_table = plan.resident;
  for (std::int32_t d : std::span(plan.resident).subspan(static_cast<std::size_t>(s.released)))
    if (d >= 0)
      add_ref(kv_tier::device, d);
  std::vector<block_copy> copies;
  copies.reserve(plan.copies);
  for (std::size_t i = static_cast<std::size_t>(s.released); i < s.table.size(); ++i)
    if (s.pending_table[i] < 0) {
      s.pending_table[i] = take_block(kv_tier::device);
      copies.push_back({s.table[i], s.pending_table[i]});
    }
  s.pending_reused = static_cast<int>(s.held().size()) - plan.copies;
  s.pending = pending_swap::in;
  return copies;
}

void block_manager::commit_swap_in(seq_id id) {
  sequence& s = get(id, "commit_swap_in");
  if (s.pending != pending_swap::in)
    misuse("commit_swap_in", id, "has no swap-in in flight");
  drop_refs(kv_tier::host, s.held());
  stats_.swapped_in_blocks += s.held().size() - s.pending_reused;
  stats_.swap_in_reused_blocks += s.pending_reused;
  s.pending_reused = 0;
  std::swap(s.table, s.pending_table);
  s.pending_table.clear();
  // The copied device blocks are not indexed; the next mark_computed re-walks the chain and links or indexes them.
  // The released blocks' links stay: they name contents, and the walk goes on from them.
  s.chain.resize(std::min(s.chain.size(), static_cast<std::size_t>(s.released)));
  s.tier = kv_tier::device;
  s.pending = pending_swap::none;
}

bool block_manager::can_swap_in(seq_id id) const {
  const sequence& s = get(id, "can_swap_in");
  if (s.tier != kv_tier::host || s.pending != pending_swap::none)
    misuse("can_swap_in", id, "is not idle on the host");
  const swap_in_plan plan = plan_swap_in(s);
  return free_blocks(kv_tier::device) - plan.revived >= plan.copies;
}

// ---- queries -------------------------------------------------------------------------------------------------------

kv_tier block_manager::tier_of(seq_id id) const {
  return get(id, "tier_of").tier;
}

std::span<const std::int32_t> block_manager::block_table(seq_id id) const {
  return get(id, "block_table").table;
}

int block_manager::held_blocks(seq_id id) const {
  return static_cast<int>(get(id, "held_blocks").held().size());
}

bool block_manager::contains(seq_id id) const {
  return seqs_.contains(id);
}

int block_manager::free_blocks(kv_tier t) const {
  const int free = static_cast<int>(pool_of(t).free_list.size());
  return t == kv_tier::device ? free + lru_size_ : free;
}

int block_manager::total_blocks(kv_tier t) const {
  return t == kv_tier::device ? cfg_.device_blocks : cfg_.host_blocks;
}

// ---- blocks --------------------------------------------------------------------------------------------------------

const block_manager::sequence& block_manager::get(seq_id id, const char* what) const {
  const auto it = seqs_.find(id);
  if (it == seqs_.end())
    misuse(what, id, "is unknown");
  return it->second;
}

block_manager::sequence& block_manager::get(seq_id id, const char* what) {
  return const_cast<sequence&>(std::as_const(*this).get(id, what));
}

block_manager::sequence& block_manager::get_idle_device(seq_id id, const char* what) {
  sequence& s = get(id, what);
  if (s.tier != kv_tier::device || s.pending != pending_swap::none)
    misuse(what, id, "is not idle on the device");
  return s;
}

std::span<const token_id> block_manager::tokens_of(std::int32_t block) const {
  return std::span(indexed_tokens_).subspan(static_cast<std::size_t>(block) * cfg_.block_size, cfg_.block_size);
}

std::int32_t block_manager::take_block(kv_tier t) {
  pool& p = pool_of(t);
  if (p.free_list.empty()) {
    if (t != kv_tier::device || lru_head_ < 0)
      throw std::logic_error("block_manager: no block left (callers must check free_blocks first)");
    unindex_block(lru_head_); // the least recently freed cached block moves to the free list
    ++stats_.evictions;
  }
  const std::int32_t b = p.free_list.back();
  p.free_list.pop_back();
  p.state[b] = block_state::in_use;
  p.refcount[b] = 1;
  return b;
}

void block_manager::add_ref(kv_tier t, std::int32_t block) {
  pool& p = pool_of(t);
  if (p.state[block] == block_state::free)
    throw std::logic_error("block_manager: reference taken on a free block");
  if (p.state[block] == block_state::cached) { // a prefix hit revives it
    lru_remove(block);
    p.state[block] = block_state::in_use;
  }
  ++p.refcount[block];
}

void block_manager::drop_ref(kv_tier t, std::int32_t block) {
  pool& p = pool_of(t);
  if (--p.refcount[block] > 0)
    return;
  if (t == kv_tier::device && meta_[block].indexed) {
    p.state[block] = block_state::cached;
    lru_push_back(block);
  } else {
    p.state[block] = block_state::free;
    p.free_list.push_back(block);
  }
}

void block_manager::drop_refs(kv_tier t, std::span<const std::int32_t> blocks) {
  // Back to front, so a chain's tail enters the LRU before its head and is evicted first: a prefix stays usable
  // longer than a suffix that cannot be matched without it.
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it)
    drop_ref(t, *it);
}

void block_manager::lru_push_back(std::int32_t block) {
  index_entry& m = meta_[block];
  m.lru_prev = lru_tail_;
  m.lru_next = -1;
  (lru_tail_ >= 0 ? meta_[lru_tail_].lru_next : lru_head_) = block;
  lru_tail_ = block;
  ++lru_size_;
}

void block_manager::lru_remove(std::int32_t block) {
  index_entry& m = meta_[block];
  (m.lru_prev >= 0 ? meta_[m.lru_prev].lru_next : lru_head_) = m.lru_next;
  (m.lru_next >= 0 ? meta_[m.lru_next].lru_prev : lru_tail_) = m.lru_prev;
  m.lru_prev = m.lru_next = -1;
  --lru_size_;
}

void block_manager::index_block(std::int32_t block, std::uint64_t hash, std::uint64_t parent_hash,
                                std::uint64_t parent_serial, std::span<const token_id> tokens) {
  index_entry& m = meta_[block];
  m.indexed = true;
  m.hash = hash;
  m.parent_hash = parent_hash;
  m.serial = next_serial_++;
  m.parent_serial = parent_serial;
  std::ranges::copy(tokens, indexed_tokens_.begin() + static_cast<std::ptrdiff_t>(block) * cfg_.block_size);
  index_[hash] = block;
  if (cfg_.block_size >= 2)
    indexed_by_start_.emplace(start_key(parent_serial, tokens_of(block)), block);
}

void block_manager::unindex_block(std::int32_t block) {
  index_entry& m = meta_[block];
  index_.erase(m.hash);
  m.indexed = false;
  if (cfg_.block_size >= 2)
    unlist(indexed_by_start_, start_key(m.parent_serial, tokens_of(block)), block);
  // Children of this block stay indexed but can no longer be matched (their parent serial is gone); they age out.
  if (device_.state[block] == block_state::cached) {
    lru_remove(block);
    device_.state[block] = block_state::free;
    device_.free_list.push_back(block);
  }
}

std::int32_t block_manager::lookup(std::uint64_t hash, std::uint64_t parent_serial,
                                   std::span<const token_id> tokens) const {
  const auto it = index_.find(hash);
  if (it == index_.end())
    return -1;
  // An equal hash is not enough: a collision must never hand out another prefix's KV.
  const index_entry& m = meta_[it->second];
  if (m.parent_serial != parent_serial || !std::ranges::equal(tokens_of(it->second), tokens))
    return -1;
  return it->second;
}

// ---- invariants ----------------------------------------------------------------------------------------------------

void block_manager::check_invariants() const {
  auto fail = [](const std::string& what) { throw std::logic_error("block_manager invariant broken: " + what); };
  auto tier_name = [](kv_tier t) { return std::string(t == kv_tier::device ? "device" : "host"); };

  // References as the tables see them.
  std::vector<int> held_device(cfg_.device_blocks, 0), held_host(cfg_.host_blocks, 0);
  auto count = [&](kv_tier t, std::span<const std::int32_t> table, seq_id id) {
    auto& held = t == kv_tier::device ? held_device : held_host;
    for (std::int32_t b : table) {
      if (b < 0 || b >= static_cast<int>(held.size()))
        fail("sequence " + std::to_string(id) + " holds block " + std::to_string(b) + ", not a " + tier_name(t) +
             " block id");
      ++held[b];
    }
  };
  for (const auto& [id, s] : seqs_) {
    if (s.released < 0 || s.released > static_cast<int>(s.table.size()) ||
        std::any_of(s.table.begin(), s.table.begin() + s.released,
                    [](std::int32_t b) { return b != released_block_entry; }))
      fail("sequence " + std::to_string(id) + " has released entries that are not released_block_entry");
    count(s.tier, s.held(), id);
    if (s.chain.size() > s.table.size())
      fail("sequence " + std::to_string(id) + " has a longer hash chain than block table");
    if (s.pending == pending_swap::none) {
      if (!s.pending_table.empty())
        fail("sequence " + std::to_string(id) + " has swap blocks without a swap in flight");
      continue;
    }
    if ((s.pending == pending_swap::out) != (s.tier == kv_tier::device))
      fail("sequence " + std::to_string(id) + " swaps towards the tier it is already in");
    if (s.pending_table.size() != s.table.size())
      fail("sequence " + std::to_string(id) + " swap reserved a different number of blocks");
    count(other(s.tier), std::span(s.pending_table).subspan(static_cast<std::size_t>(s.released)), id);
  }

  for (kv_tier t : {kv_tier::device, kv_tier::host}) {
    const pool& p = pool_of(t);
    const auto& held = t == kv_tier::device ? held_device : held_host;
    const std::string name = tier_name(t) + " block ";
    std::vector<char> on_free_list(total_blocks(t), 0);
    for (std::int32_t b : p.free_list) {
      if (b < 0 || b >= total_blocks(t))
        fail(tier_name(t) + " free list holds out-of-range id " + std::to_string(b));
      if (on_free_list[b]++)
        fail(name + std::to_string(b) + " is on the free list twice");
    }
    int n_free = 0, n_used = 0, n_cached = 0;
    for (std::int32_t b = 0; b < total_blocks(t); ++b) {
      const std::string blk = name + std::to_string(b);
      if (p.refcount[b] != held[b])
        fail(blk + " has refcount " + std::to_string(p.refcount[b]) + " but " + std::to_string(held[b]) +
             " tables hold it");
      const bool indexed = t == kv_tier::device && meta_[b].indexed;
      switch (p.state[b]) {
        case block_state::free:
          ++n_free;
          if (!on_free_list[b] || held[b] != 0 || indexed)
            fail(blk + " is free but held, indexed or missing from the free list");
          break;
        case block_state::in_use:
          ++n_used;
          if (on_free_list[b] || held[b] == 0)
            fail(blk + " is in use but on the free list or held by no table");
          break;
        case block_state::cached:
          ++n_cached;
          if (on_free_list[b] || held[b] != 0 || !indexed)
            fail(blk + " is cached-free but on the free list, held or not indexed");
          break;
      }
    }
    if (n_free != static_cast<int>(p.free_list.size()) || n_free + n_used + n_cached != total_blocks(t))
      fail(tier_name(t) + ": free + in use + cached-free != total");
    if (t == kv_tier::host && n_cached != 0)
      fail("host blocks are cached");
    if (t == kv_tier::device && n_cached != lru_size_)
      fail("the LRU length differs from the number of cached-free blocks");
  }

  // The LRU list: well linked, exactly the cached blocks.
  int walked = 0;
  for (std::int32_t b = lru_head_, prev = -1; b >= 0; prev = b, b = meta_[b].lru_next) {
    if (++walked > lru_size_ || device_.state[b] != block_state::cached || meta_[b].lru_prev != prev)
      fail("the LRU list is broken at device block " + std::to_string(b));
    if (meta_[b].lru_next < 0 && lru_tail_ != b)
      fail("the LRU list's tail is not its last block");
  }
  if (walked != lru_size_)
    fail("the LRU list is shorter than its length");

  // Partly filled blocks on offer: each is its owner's, in use, in the owner's table, not indexed, listed under its
  // parent once; and every sequence that names one owns its entry.
  if (partial_by_start_.size() != partial_.size())
    fail("the partial-block lists disagree in size");
  for (const auto& [b, e] : partial_) {
    const std::string blk = "partial device block " + std::to_string(b);
    const auto owner = seqs_.find(e.owner);
    if (b < 0 || b >= cfg_.device_blocks || device_.state[b] != block_state::in_use || meta_[b].indexed)
      fail(blk + " is not an unindexed block in use");
    if (owner == seqs_.end() || owner->second.partial_block != b || owner->second.tier != kv_tier::device ||
        std::ranges::find(owner->second.held(), b) == owner->second.held().end())
      fail(blk + " is not in its owner's device table");
    if (e.length < 2 || e.length >= cfg_.block_size)
      fail(blk + " claims " + std::to_string(e.length) + " tokens");
    if (!listed_once(partial_by_start_, start_key(e.parent_serial, tokens_of(b)), b))
      fail(blk + " is not listed once under its parent and first tokens");
  }
  for (const auto& [id, s] : seqs_) {
    if (s.partial_block >= 0 && !partial_.contains(s.partial_block))
      fail("sequence " + std::to_string(id) + " names a partial block with no entry");
    if (s.copy_before_write >= static_cast<int>(s.table.size()) ||
        (s.copy_before_write >= 0 && (s.tier != kv_tier::device || s.copy_before_write < s.released)))
      fail("sequence " + std::to_string(id) + " must copy a block it does not hold on the device");
  }

  // The index and the blocks agree both ways, and every entry's hash is the hash of its stored tokens.
  for (const auto& [h, b] : index_) {
    if (b < 0 || b >= cfg_.device_blocks || !meta_[b].indexed || meta_[b].hash != h)
      fail("the index maps a hash to device block " + std::to_string(b) + " that does not carry it");
    if (hash_(meta_[b].parent_hash, tokens_of(b)) != h)
      fail("device block " + std::to_string(b) + "'s hash does not match its tokens");
  }
  for (std::int32_t b = 0; b < cfg_.device_blocks; ++b)
    if (meta_[b].indexed) {
      const auto it = index_.find(meta_[b].hash);
      if (it == index_.end() || it->second != b)
        fail("indexed device block " + std::to_string(b) + "'s hash does not map back to it");
      if (cfg_.block_size < 2)
        continue;
      if (!listed_once(indexed_by_start_, start_key(meta_[b].parent_serial, tokens_of(b)), b))
        fail("indexed device block " + std::to_string(b) + " is not listed once under its parent and first tokens");
    }
  if (indexed_by_start_.size() != (cfg_.block_size >= 2 ? index_.size() : 0))
    fail("the lists of indexed blocks by start and by hash disagree in size");
}

} // namespace troupe::runtime
