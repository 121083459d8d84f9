// kv_cache: one prepare message per step. The order matters: blocks freed
// first make room; swap-outs are copied to the host before their device blocks
// are released; then swap-ins and reservations take device blocks; copies into
// the device (swap-in, copy-on-write) finish before the reply, so the step that
// follows reads complete blocks.
#include "actors/kv_cache.hpp"

#include <algorithm>
#include <functional>
#include <memory>
#include <stdexcept>

namespace troupe::actors {

namespace {

using runtime::block_manager;
using runtime::kv_copy;
using runtime::kv_tier;

struct kv_cache_state {
  std::unique_ptr<block_manager> blocks;
  executor_actor executor;
  std::size_t block_bytes = 0;
  bool check_invariants = false;
  static inline const char* name = "kv_cache";
};

using kv_pointer = kv_cache_actor::stateful_pointer<kv_cache_state>;

void fill_counts(const kv_cache_state& st, kv_prepared& out) {
  const auto& bm = *st.blocks;
  out.device_blocks_free = bm.free_blocks(kv_tier::device);
  out.device_blocks_total = bm.total_blocks(kv_tier::device);
  out.host_blocks_free = bm.free_blocks(kv_tier::host);
  out.host_blocks_total = bm.total_blocks(kv_tier::host);
  out.prefix_queries = bm.stats().prefix_queries;
  out.prefix_hits = bm.stats().prefix_hits;
  out.window_released_blocks = bm.stats().window_released_blocks;
}

// A swap whose copy failed: the sequences' blocks go on both tiers (the pending swap's too), and
// they start over as recomputes. Their tokens are known: nothing is lost but time.
void recompute_instead(block_manager& bm, std::vector<seq_id>& swapping, std::vector<seq_id>& recomputed,
                       std::uint64_t& swap_bytes, kv_prepared& out) {
  for (auto id : swapping) {
    bm.free_sequence(id);
    recomputed.push_back(id);
  }
  swapping.clear();
  swap_bytes = 0;
  ++out.swap_copy_failures;
}

// Runs `copies` on the executor, then `next`; an empty list skips the round trip.
// A failed copy runs `on_failure` before `next`; without one, the prepare fails.
template <class Next>
void copy_then(kv_pointer self, kv_copy kind, std::vector<runtime::block_copy> copies,
               caf::typed_response_promise<kv_prepared> rp, Next next,
               std::function<void(const caf::error&)> on_failure) {
  if (copies.empty()) {
    next();
    return;
  }
  self->request(self->state.executor, caf::infinite, copy_atom::value, copy_request{kind, std::move(copies)})
      .then([next](done_atom) mutable { next(); },
            [next, on_failure, rp](caf::error& err) mutable {
              if (!on_failure) {
                rp.deliver(std::move(err));
                return;
              }
              on_failure(err);
              next();
            });
}

// Block reservations for the step's work, copy-on-write copies, then the reply.
void reserve_and_reply(kv_pointer self, std::shared_ptr<kv_prepare> req, std::shared_ptr<kv_prepared> out,
                       caf::typed_response_promise<kv_prepared> rp) {
  auto& bm = *self->state.blocks;
  std::vector<runtime::block_copy> cow_copies;
  for (auto& entry : req->reserve) {
    reserve_grant grant;
    grant.id = entry.id;
    if (std::find(out->swap_in_failed.begin(), out->swap_in_failed.end(), entry.id) != out->swap_in_failed.end()) {
      out->grants.push_back(std::move(grant)); // its blocks are gone: it starts over as a recompute
      continue;
    }
    const bool is_new = !bm.contains(entry.id);
    int start = entry.start, total = entry.start + entry.num_tokens;
    if (is_new) {
      // Without lookup the sequence still enters the cache; it just computes its whole prompt.
      start = bm.add_sequence(
          entry.id, entry.lookup_prefix ? std::span<const token_id>(entry.tokens) : std::span<const token_id>());
      total = std::min<int>(start + entry.num_tokens, static_cast<int>(entry.tokens.size()));
    }
    // A sequence whose swap-in was refused is still on the host: it waits.
    if (bm.tier_of(entry.id) == kv_tier::device) {
      if (auto copies = bm.grow(entry.id, total, start)) {
        cow_copies.insert(cow_copies.end(), copies->begin(), copies->end());
        grant.granted = true;
        grant.start = start;
        grant.end = total;
        auto table = bm.block_table(entry.id);
        grant.block_table.assign(table.begin(), table.end());
      }
    }
    if (!grant.granted && is_new)
      bm.free_sequence(entry.id); // give back the prefix references; it is tried again later
    out->grants.push_back(std::move(grant));
  }
  copy_then(
      self, kv_copy::device_to_device, std::move(cow_copies), rp,
      [self, out, rp]() mutable {
        if (self->state.check_invariants)
          self->state.blocks->check_invariants();
        fill_counts(self->state, *out);
        rp.deliver(std::move(*out));
      },
      nullptr); // the sequences were granted blocks whose contents are now wrong: the prepare fails
}

// Swap-ins: host blocks are copied back before the sequences can be reserved on the device.
void swap_in_then_reserve(kv_pointer self, std::shared_ptr<kv_prepare> req, std::shared_ptr<kv_prepared> out,
                          caf::typed_response_promise<kv_prepared> rp) {
  auto& bm = *self->state.blocks;
  std::vector<runtime::block_copy> copies_in;
  for (auto id : req->swap_in) {
    if (auto copies = bm.contains(id) ? bm.swap_in(id) : std::nullopt) {
      copies_in.insert(copies_in.end(), copies->begin(), copies->end());
      out->swapped_in.push_back(id);
      out->swap_in_bytes += copies->size() * self->state.block_bytes;
      // The rest of the (still host-tier) table is blocks whose content the device kept: no copy.
      out->swap_in_reused_bytes +=
          (static_cast<std::size_t>(bm.held_blocks(id)) - copies->size()) * self->state.block_bytes;
    } else {
      out->swap_in_refused.push_back(id);
    }
  }
  copy_then(
      self, kv_copy::host_to_device, std::move(copies_in), rp,
      [self, req, out, rp]() mutable {
        for (auto id : out->swapped_in)
          self->state.blocks->commit_swap_in(id);
        reserve_and_reply(self, req, out, rp);
      },
      // The copy back failed: the device blocks hold nothing usable.
      [self, out](const caf::error&) {
        out->swap_in_reused_bytes = 0;
        recompute_instead(*self->state.blocks, out->swapped_in, out->swap_in_failed, out->swap_in_bytes, *out);
      });
}

kv_cache_actor::behavior_type kv_cache_behavior(kv_pointer self, runtime::block_manager_config cfg,
                                                executor_actor executor, std::size_t block_bytes,
                                                bool check_invariants) {
  self->state.blocks = std::make_unique<block_manager>(cfg);
  self->state.executor = std::move(executor);
  self->state.block_bytes = block_bytes;
  self->state.check_invariants = check_invariants;
  return {
      [self](prepare_atom, kv_prepare& msg) -> caf::result<kv_prepared> {
        auto rp = self->make_response_promise<kv_prepared>();
        auto req = std::make_shared<kv_prepare>(std::move(msg));
        auto out = std::make_shared<kv_prepared>();
        auto& bm = *self->state.blocks;
        // Index what the last step computed first: a sequence that finished in it is
        // released just below, and its last blocks should still be reusable.
        const auto& done = req->followup;
        for (std::size_t i = 0; i < done.computed_ids.size(); ++i)
          if (bm.contains(done.computed_ids[i]) && bm.tier_of(done.computed_ids[i]) == kv_tier::device)
            bm.mark_computed(done.computed_ids[i], done.computed_tokens[i], done.computed_counts[i]);
        for (std::size_t i = 0; i < done.trim_ids.size(); ++i)
          if (bm.contains(done.trim_ids[i]) && bm.tier_of(done.trim_ids[i]) == kv_tier::device)
            bm.trim(done.trim_ids[i], done.trim_tokens[i]);
        // Sliding window: what the computed sequences' next tokens can no longer see goes back, after the trims (a
        // rejected draft's positions count only once they are cut off).
        for (std::size_t i = 0; i < done.computed_ids.size(); ++i) {
          const seq_id id = done.computed_ids[i];
          if (!bm.contains(id) || bm.tier_of(id) != kv_tier::device)
            continue;
          int computed = done.computed_counts[i];
          for (std::size_t j = 0; j < done.trim_ids.size(); ++j)
            if (done.trim_ids[j] == id)
              computed = std::min(computed, done.trim_tokens[j]);
          bm.release_before_window(id, computed);
        }
        // Forks before releases: a parent that finished in the step that forked it still hands its blocks on.
        for (std::size_t i = 0; i < done.fork_parents.size(); ++i)
          if (bm.contains(done.fork_parents[i]) && !bm.contains(done.fork_children[i]))
            bm.fork(done.fork_parents[i], done.fork_children[i]);
        for (auto id : req->release)
          if (bm.contains(id))
            bm.free_sequence(id);
        for (auto id : req->recompute)
          if (bm.contains(id))
            bm.free_sequence(id);
        // A sequence is swapped out at most once per prepare, whatever the caller sent.
        std::sort(req->swap_out.begin(), req->swap_out.end());
        req->swap_out.erase(std::unique(req->swap_out.begin(), req->swap_out.end()), req->swap_out.end());
        std::vector<runtime::block_copy> out_copies;
        for (auto id : req->swap_out) {
          auto copies = bm.contains(id) ? bm.swap_out(id) : std::nullopt;
          if (copies) {
            out_copies.insert(out_copies.end(), copies->begin(), copies->end());
            out->swapped_out.push_back(id);
            out->swap_out_bytes += copies->size() * self->state.block_bytes;
          } else {
            // The host tier is full: fall back to recompute.
            if (bm.contains(id))
              bm.free_sequence(id);
            out->swap_fell_back.push_back(id);
          }
        }
        copy_then(
            self, kv_copy::device_to_host, std::move(out_copies), rp,
            [self, req, out, rp]() mutable {
              for (auto id : out->swapped_out)
                self->state.blocks->commit_swap_out(id);
              swap_in_then_reserve(self, req, out, rp);
            },
            // The copy out failed: the host blocks are not a copy. Recompute, as when the host tier is full.
            [self, out](const caf::error&) {
              recompute_instead(*self->state.blocks, out->swapped_out, out->swap_fell_back, out->swap_out_bytes, *out);
            });
        return rp;
      },
      [self](peek_prefix_atom, const std::vector<token_id>& prompt) -> int {
        return self->state.blocks->cached_prefix_tokens(prompt);
      },
      [self](restart_atom, executor_actor& executor) { self->state.executor = std::move(executor); },
  };
}

} // namespace

kv_cache_actor spawn_kv_cache(caf::actor_system& sys, runtime::block_manager_config cfg, executor_actor executor,
                              std::size_t block_bytes, bool check_invariants) {
  return sys.spawn(kv_cache_behavior, cfg, std::move(executor), block_bytes, check_invariants);
}

} // namespace troupe::actors
