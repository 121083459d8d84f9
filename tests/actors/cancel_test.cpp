// Cancel and a vanished client: the request ends (cancelled, or silently when
// nobody listens), the scheduler aborts the sequence, and its blocks are free
// again within a step; other requests are unaffected.
#include <doctest/doctest.h>

#include "tests/support/engine_harness.hpp"

using namespace troupe;
using namespace troupe::testing;

TEST_CASE("cancel ends a running request with reason cancelled and frees its blocks") {
  engine_fixture fx(stories_engine_config());
  engine_client client(fx.sys, fx.engine);
  auto id = client.send(greedy_spec("Once upon a time", 400));
  auto other = client.send(greedy_spec("The little dog", 30));
  client.pump_until([&] { return client.outcomes[id].token_ids.size() >= 5; });
  caf::anon_send(fx.engine, cancel_atom::value, id);
  client.pump_until([&] { return client.ended(id) && client.ended(other); });
  REQUIRE(client.outcomes[id].finished);
  CHECK(client.outcomes[id].final.reason == "cancelled");
  CHECK(client.outcomes[id].token_ids.size() < 400);
  REQUIRE(client.outcomes[other].finished);
  CHECK(client.outcomes[other].token_ids.size() == 30);
  auto stats = fx.settled_stats();
  CHECK(stats.running == 0);
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
  CHECK(stats.requests_aborted >= 1);
}

TEST_CASE("a sink that dies mid-stream aborts its request and its blocks come back") {
  engine_fixture fx(stories_engine_config());
  // A sink that quits at its first delta, as a disconnecting client would.
  auto sink = fx.sys.spawn([](sink_actor::pointer self) -> sink_actor::behavior_type {
    return {
        [self](const delta&) { self->quit(); },
        [](const finished&) {},
        [](const troupe::failed&) {},
    };
  });
  caf::scoped_actor self{fx.sys};
  self->request(fx.engine, caf::infinite, generate_atom::value, greedy_spec("Once upon a time", 400), sink)
      .receive([](request_id) {}, [](caf::error& e) { FAIL(to_string(e)); });
  // Wait for the abort to reach the scheduler: the engine ends up with no sequence and every block free.
  auto stats = fx.wait_for_stats([](const engine_stats& s) {
    return s.requests_aborted == 1 && s.running == 0 && s.device_blocks_free == s.device_blocks_total;
  });
  CHECK(stats.requests_aborted == 1);
  CHECK(stats.running == 0);
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
  CHECK(stats.decode_tokens < 399);  // it stopped early
  // The engine still serves.
  auto out = fx.run({greedy_spec("The little dog", 10)});
  REQUIRE(out[0].finished);
}

TEST_CASE("cancelling an unknown or finished request is harmless") {
  engine_fixture fx(stories_engine_config());
  caf::anon_send(fx.engine, cancel_atom::value, request_id{12345});
  auto out = fx.run({greedy_spec("One day", 5)});
  REQUIRE(out[0].finished);
  caf::anon_send(fx.engine, cancel_atom::value, request_id{1});
  auto again = fx.run({greedy_spec("One day", 5)});
  REQUIRE(again[0].finished);
  CHECK(again[0].token_ids == out[0].token_ids);
}
