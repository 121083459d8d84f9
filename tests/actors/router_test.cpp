// The router in front of several engines (troupe/router.hpp), driven through its actors: over two
// in-process engines it gives what one engine gives; cache-aware routing finds more of the replicas' prefix
// caches than round-robin on a workload of shared system prompts; over two troupe-engine processes, a
// replica killed under load fails only its requests that had tokens, one frozen before its first token has
// its request served by the other, and with none left the router ends.
#include <doctest/doctest.h>

#include <caf/all.hpp>

#include <algorithm>
#include <thread>

#include "tests/support/engine_harness.hpp"
#include "tests/support/engine_process.hpp"
#include "tests/support/run_command.hpp"
#include "troupe/remote_engine.hpp"
#include "troupe/router.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

std::vector<request_spec> mixed_requests() {
  std::vector<request_spec> specs;
  const char* prompts[] = {"Once upon a time", "The little dog", "Lily wanted", "Tom had a ball", "The sun was"};
  for (int i = 0; i < 10; ++i) {
    auto s = greedy_spec(prompts[i % 5], 20 + i);
    if (i % 2 == 1) {
      s.params.temperature = 0.9f;
      s.params.seed = 100 + static_cast<std::uint64_t>(i);
    }
    specs.push_back(s);
  }
  return specs;
}

} // namespace

TEST_CASE("a router over two engines gives what one engine gives, and sums their stats") {
  const auto specs = mixed_requests();
  engine_fixture single(stories_engine_config());
  const auto reference = single.run(specs);

  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  std::vector<engine_actor> engines{spawn_engine(sys, stories_engine_config()),
                                    spawn_engine(sys, stories_engine_config())};
  for (const std::string policy : {"round-robin", "least-loaded", "cache-aware"}) {
    INFO(policy);
    router_config rc;
    rc.policy = policy;
    const auto router = spawn_router(sys, engines, rc);
    engine_client client(sys, router);
    std::vector<request_id> ids;
    for (const auto& s : specs)
      ids.push_back(client.send(s));
    client.pump_until(
        [&] { return std::all_of(ids.begin(), ids.end(), [&](request_id id) { return client.ended(id); }); });
    for (std::size_t i = 0; i < specs.size(); ++i) {
      INFO("request " << i);
      const auto& o = client.outcomes[ids[i]];
      REQUIRE(o.finished);
      CHECK(o.final.id == ids[i]); // the router's ids, not a replica's
      CHECK(o.token_ids == reference[i].token_ids);
      CHECK(o.final.usage.completion_tokens == reference[i].final.usage.completion_tokens);
    }
    // Cancel through the router: the request ends, cancelled.
    auto long_spec = greedy_spec("Once upon a time", 400);
    const auto id = client.send(long_spec);
    client.pump_until([&] { return client.outcomes[id].deltas > 0; });
    caf::anon_send(router, cancel_atom::value, id);
    client.pump_until([&] { return client.ended(id); });
    CHECK(client.outcomes[id].final.reason == "cancelled");
    caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
  }
  caf::scoped_actor self{sys};
  // Each engine's stats once it is idle (a cancelled request's last step may still be running).
  auto settled = [&](const engine_actor& e) {
    engine_stats s;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    do {
      self->request(e, caf::infinite, stats_atom::value).receive([&](engine_stats& x) { s = x; }, [](caf::error&) {});
    } while ((s.running != 0 || s.waiting != 0 || s.device_blocks_free != s.device_blocks_total) &&
             std::chrono::steady_clock::now() < deadline);
    return s;
  };
  const auto a = settled(engines[0]);
  const auto b = settled(engines[1]);
  const auto router = spawn_router(sys, engines, {});
  self->request(router, caf::infinite, stats_atom::value)
      .receive(
          [&](engine_stats& s) {
            CHECK(s.requests_finished == a.requests_finished + b.requests_finished);
            CHECK(s.device_blocks_total == a.device_blocks_total + b.device_blocks_total);
            CHECK(s.decode_tokens == a.decode_tokens + b.decode_tokens);
          },
          [](caf::error& e) { FAIL(to_string(e)); });
  CHECK(a.requests_finished > 0);
  CHECK(b.requests_finished > 0); // both replicas served
  caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
  for (auto& e : engines)
    caf::anon_send_exit(e, caf::exit_reason::user_shutdown);
}

TEST_CASE("cache-aware routing finds more prefix-cache hits than round-robin over shared system prompts") {
  // 3 system prompts x 6 users, one request at a time: round-robin (request k to replica k % 2) sends each
  // system prompt to both replicas in turn, cache-aware to one.
  const std::string systems[] = {
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. ",
      "One day, a big dog came to the park. The dog was very friendly and wanted to play with everyone. ",
      "Tom had a red ball. He liked to throw it high in the sky and catch it with both of his hands. "};
  const std::string users[] = {"Lily said", "The dog ran", "Tom saw", "Mom said", "They went", "It was"};
  auto hits_with = [&](const std::string& policy) {
    caf::actor_system_config cfg;
    caf::actor_system sys{cfg};
    std::vector<engine_actor> engines{spawn_engine(sys, stories_engine_config()),
                                      spawn_engine(sys, stories_engine_config())};
    router_config rc;
    rc.policy = policy;
    const auto router = spawn_router(sys, engines, rc);
    engine_client client(sys, router);
    for (const auto& u : users)
      for (const auto& s : systems) {
        const auto id = client.send(greedy_spec(s + u, 4));
        client.pump_until([&] { return client.ended(id); });
        REQUIRE(client.outcomes[id].finished);
      }
    engine_stats st;
    caf::scoped_actor self{sys};
    self->request(router, caf::infinite, stats_atom::value)
        .receive([&](engine_stats& s) { st = s; }, [](caf::error&) {});
    caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
    for (auto& e : engines)
      caf::anon_send_exit(e, caf::exit_reason::user_shutdown);
    return st.prefix_hits;
  };
  const auto round_robin = hits_with("round-robin");
  const auto cache_aware = hits_with("cache-aware");
  MESSAGE("prefix-cache hits (prompt tokens): round-robin " << round_robin << ", cache-aware " << cache_aware);
  CHECK(cache_aware > round_robin);
}

TEST_CASE(
    "a router over engine processes: a killed replica fails only its started requests, a frozen one's "
    "unstarted request goes to the other, and with none left the router ends") {
  engine_process first, second;
  caf::actor_system_config cfg;
  caf::actor_system sys{remote_ready(cfg)};
  std::vector<engine_actor> engines{connect_engine(sys, "127.0.0.1", first.port),
                                    connect_engine(sys, "127.0.0.1", second.port)};
  router_config rc;
  rc.policy = "round-robin";
  const auto router = spawn_router(sys, engines, rc);
  engine_client client(sys, router);

  // Round-robin: a to the first replica, b to the second, both streaming.
  const auto a = client.send(greedy_spec("Once upon a time", 400));
  const auto b = client.send(greedy_spec("The little dog", 200));
  client.pump_until([&] { return client.outcomes[a].deltas > 0 && client.outcomes[b].deltas > 0; });
  first.process.kill();
  client.pump_until([&] { return client.ended(a) && client.ended(b); });
  CHECK(client.outcomes[a].failed);
  CHECK(client.outcomes[a].error.code == "engine_unavailable");
  CHECK(client.outcomes[b].finished); // the other replica's request goes on
  // New requests: all to the replica left.
  for (int i = 0; i < 3; ++i) {
    const auto id = client.send(greedy_spec("Lily wanted", 8));
    client.pump_until([&] { return client.ended(id); });
    CHECK(client.outcomes[id].finished);
  }

  // Frozen before its first token, then killed: the request starts over elsewhere... but only one replica
  // is left, so use a fresh pair for that step.
  engine_process third;
  std::vector<engine_actor> pair{connect_engine(sys, "127.0.0.1", second.port),
                                 connect_engine(sys, "127.0.0.1", third.port)};
  const auto router2 = spawn_router(sys, pair, rc);
  engine_client client2(sys, router2);
  ::kill(second.process.pid(), SIGSTOP); // replica 0 of router2 takes the next request and never answers
  const auto c = client2.send(greedy_spec("Tom had a ball", 12));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(client2.outcomes[c].deltas == 0);
  second.process.kill();
  client2.pump_until([&] { return client2.ended(c); }, std::chrono::seconds(30));
  CHECK(client2.outcomes[c].finished); // served by the third process from the start
  CHECK(client2.outcomes[c].token_ids.size() == 12);

  // The last replica goes: the router ends (a server watching it answers 503 from then on).
  caf::scoped_actor watcher{sys};
  watcher->monitor(router2);
  third.process.kill();
  bool ended = false;
  watcher->receive([&](caf::down_msg&) { ended = true; }, caf::after(std::chrono::seconds(15)) >> [] {});
  CHECK(ended);
  caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
}

TEST_CASE("bad router settings are refused naming them") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  const auto engine = spawn_engine(sys, stories_engine_config());
  router_config bad_policy;
  bad_policy.policy = "random";
  CHECK_THROWS_WITH_AS(spawn_router(sys, {engine}, bad_policy), doctest::Contains("router.policy: 'random'"),
                       config_error);
  router_config bad_margin;
  bad_margin.load_margin = -1;
  CHECK_THROWS_WITH_AS(spawn_router(sys, {engine}, bad_margin), doctest::Contains("router.load-margin"), config_error);
  CHECK_THROWS_WITH_AS(spawn_router(sys, {}, {}), doctest::Contains("at least one engine"), config_error);
  caf::anon_send_exit(engine, caf::exit_reason::user_shutdown);
}
