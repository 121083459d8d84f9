// The kv_cache actor's prepare protocol driven directly: reservations with a
// prefix hit, swap out and back in through the executor's block copies, and a
// sequence named twice for swap-out (two starving sequences choosing the same
// victim) swapped once instead of breaking the actor.
#include <doctest/doctest.h>

#include "actors/executor.hpp"
#include "actors/kv_cache.hpp"
#include "runtime/choices.hpp"
#include "tests/support/engine_harness.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {
struct kv_fixture {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  std::shared_ptr<runtime::cpu_model_runner> runner;
  executor_actor executor;
  kv_cache_actor kv;
  kv_fixture() {
    const auto& m = stories_model();
    runner = std::make_shared<runtime::cpu_model_runner>(m.config, m.weights, runtime::kv_cache_config{8, 16, 8}, 1);
    executor = actors::spawn_executor(sys, runner);
    kv = actors::spawn_kv_cache(sys, runtime::block_manager_config{8, 8, 16, true}, executor, runner->block_bytes(),
                                true);
  }
  ~kv_fixture() {
    caf::anon_send_exit(kv, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(executor, caf::exit_reason::user_shutdown);
  }
  kv_prepared prepare(kv_prepare p) {
    caf::scoped_actor self{sys};
    kv_prepared out;
    self->request(kv, caf::infinite, prepare_atom::value, std::move(p))
        .receive([&](kv_prepared& r) { out = std::move(r); }, [&](caf::error& e) { FAIL(to_string(e)); });
    return out;
  }
};
} // namespace

TEST_CASE("kv_cache: reserve, swap out twice-named, swap back in") {
  kv_fixture fx;
  std::vector<token_id> tokens(40, 5);
  kv_prepare reserve;
  reserve.reserve.push_back({1, tokens, 0, 40});
  auto r1 = fx.prepare(reserve);
  REQUIRE(r1.grants.size() == 1);
  CHECK(r1.grants[0].granted);
  CHECK(r1.grants[0].block_table.size() == 3);
  CHECK(r1.device_blocks_free == 5);

  kv_prepare out;
  out.swap_out = {1, 1};
  auto r2 = fx.prepare(out);
  CHECK(r2.swapped_out == std::vector<seq_id>{1});
  CHECK(r2.device_blocks_free == 8);
  CHECK(r2.host_blocks_free == 5);
  CHECK(r2.swap_out_bytes == 3 * fx.runner->block_bytes());

  kv_prepare in;
  in.swap_in = {1};
  in.reserve.push_back({1, {}, 40, 1});
  auto r3 = fx.prepare(in);
  CHECK(r3.swapped_in == std::vector<seq_id>{1});
  REQUIRE(r3.grants.size() == 1);
  CHECK(r3.grants[0].granted);
  CHECK(r3.grants[0].start == 40);
  CHECK(r3.host_blocks_free == 8);

  kv_prepare release;
  release.release = {1};
  auto r4 = fx.prepare(release);
  CHECK(r4.device_blocks_free == 8);
}

TEST_CASE("kv_cache: forked choices share the parent's blocks, copy the one they write, and free them all at the end") {
  kv_fixture fx;
  std::vector<token_id> prompt(40, 5);
  kv_prepare first;
  first.reserve.push_back({1, prompt, 0, 39}); // all but the last prompt token: blocks 0-2, the third partial
  auto r1 = fx.prepare(first);
  REQUIRE(r1.grants.size() == 1);
  REQUIRE(r1.grants[0].granted);
  CHECK(r1.device_blocks_free == 5);

  // The step's followup forks two choices; each of the three then writes position 39 of the shared third block.
  const seq_id a = runtime::choice_seq_id(1, 1), b = runtime::choice_seq_id(1, 2);
  kv_prepare next;
  next.followup.fork_parents = {1, 1};
  next.followup.fork_children = {a, b};
  for (auto id : {seq_id{1}, a, b})
    next.reserve.push_back({id, {}, 39, 1});
  auto r2 = fx.prepare(next);
  REQUIRE(r2.grants.size() == 3);
  for (const auto& g : r2.grants) {
    CHECK(g.granted);
    CHECK(g.start == 39);
    CHECK(g.end == 40);
    REQUIRE(g.block_table.size() == 3);
    CHECK(g.block_table[0] == r2.grants[0].block_table[0]); // the full blocks are the parent's own
    CHECK(g.block_table[1] == r2.grants[0].block_table[1]);
  }
  // Three tables of three blocks held in five: the two full blocks once, the written one three times (two copies).
  CHECK(r2.device_blocks_free == 8 - 5);
  CHECK(r2.grants[0].block_table[2] != r2.grants[1].block_table[2]);
  CHECK(r2.grants[1].block_table[2] != r2.grants[2].block_table[2]);
  CHECK(r2.grants[0].block_table[2] != r2.grants[2].block_table[2]);

  // The parent ends first: its choices keep the shared blocks; when they end too, every block is free.
  kv_prepare end_parent;
  end_parent.release = {1};
  CHECK(fx.prepare(end_parent).device_blocks_free == 8 - 4);
  kv_prepare end_all;
  end_all.release = {a, b};
  CHECK(fx.prepare(end_all).device_blocks_free == 8);
}

TEST_CASE("kv_cache: a fork in the same prepare that releases its parent still hands the blocks on") {
  kv_fixture fx;
  std::vector<token_id> prompt(20, 5);
  kv_prepare first;
  first.reserve.push_back({1, prompt, 0, 20});
  REQUIRE(fx.prepare(first).grants.at(0).granted);
  const seq_id a = runtime::choice_seq_id(1, 1);
  kv_prepare next;
  next.followup.fork_parents = {1};
  next.followup.fork_children = {a};
  next.release = {1}; // its first token was a stop id
  next.reserve.push_back({a, {}, 19, 1});
  auto r = fx.prepare(next);
  REQUIRE(r.grants.size() == 1);
  CHECK(r.grants[0].granted);
  CHECK(r.grants[0].block_table.size() == 2);
  CHECK(r.device_blocks_free == 6); // the child alone holds the two blocks: nothing was copied
}
