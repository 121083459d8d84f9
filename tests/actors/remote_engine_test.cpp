// Engines in other processes (troupe/remote_engine.hpp): every message an engine takes or sends crosses
// CAF's wire intact; an engine published by one actor system serves another as it serves its own; and an
// engine process killed under load (troupe-engine, a child process) fails what it was running with
// engine_unavailable through net's bridge, at once, and every later request too, instead of leaving them
// hanging.
#include <doctest/doctest.h>

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include <cmath>
#include <condition_variable>
#include <limits>
#include <mutex>

#include "net/engine_bridge.hpp"
#include "tests/support/engine_harness.hpp"
#include "tests/support/engine_process.hpp"
#include "tests/support/run_command.hpp"
#include "troupe/remote_engine.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

template <class T>
std::vector<char> bytes_of(caf::actor_system& sys, T x) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  const auto err = sink(x);
  REQUIRE_MESSAGE(!err, sys.render(err));
  return buf;
}

// x written, read back, and written again: the second writing equals the first.
template <class T>
T round_trip(caf::actor_system& sys, const T& x) {
  const auto buf = bytes_of(sys, x);
  T y;
  caf::binary_deserializer source{sys, buf};
  const auto err = source(y);
  REQUIRE_MESSAGE(!err, sys.render(err));
  CHECK(bytes_of(sys, y) == buf);
  return y;
}

std::vector<request_spec> mixed_requests() {
  std::vector<request_spec> specs;
  specs.push_back(greedy_spec("Once upon a time", 24));
  auto seeded = greedy_spec("The little dog", 20);
  seeded.params.temperature = 1.0f;
  seeded.params.seed = 7;
  specs.push_back(seeded);
  auto nucleus = greedy_spec("Lily wanted", 16);
  nucleus.params.temperature = 0.8f;
  nucleus.params.top_p = 0.9f;
  nucleus.params.seed = 3;
  nucleus.params.logprobs = 2;
  specs.push_back(nucleus);
  auto stopped = greedy_spec("Once upon a time", 40, false);
  stopped.params.stop = {"girl"};
  specs.push_back(stopped);
  auto choices = greedy_spec("Tom had a ball", 12);
  choices.params.temperature = 1.0f;
  choices.params.seed = 11;
  choices.params.n = 2;
  specs.push_back(choices);
  return specs;
}

// net's bridge events for one session, collected from the push function's thread.
struct event_log {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<net::bridge_event> events;

  net::push_fn push() {
    return [this](net::bridge_event ev) {
      std::lock_guard lock(mutex);
      events.push_back(std::move(ev));
      changed.notify_all();
    };
  }
  // The first event of `tag` that ends its request, waiting at most `limit`.
  std::optional<net::bridge_event> end_of(const std::string& tag, std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex);
    std::optional<net::bridge_event> found;
    changed.wait_for(lock, limit, [&] {
      for (const auto& ev : events)
        if (ev.tag == tag && ev.what != net::bridge_event::kind::delta) {
          found = ev;
          return true;
        }
      return false;
    });
    return found;
  }
  bool has_delta(const std::string& tag, std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, limit, [&] {
      for (const auto& ev : events)
        if (ev.tag == tag && ev.what == net::bridge_event::kind::delta)
          return true;
      return false;
    });
  }
};

} // namespace

TEST_CASE("every message an engine takes or sends crosses the wire intact") {
  caf::actor_system_config cfg;
  caf::actor_system sys{remote_ready(cfg)};

  request_spec spec;
  spec.prompt = "Once upon a time";
  spec.prompt_ids = {1, 403, 407};
  spec.messages = {{"user", "hi", {}, ""}, {"assistant", "", {{"call_1", "ticket", "{\"id\":3}"}}, ""}};
  spec.add_special_tokens = false;
  spec.params.temperature = 0.7f;
  spec.params.top_p = 0.9f;
  spec.params.top_k = 40;
  spec.params.min_p = 0.05f;
  spec.params.seed = 1234567890123ULL;
  spec.params.max_tokens = 77;
  spec.params.min_tokens = 3;
  spec.params.stop = {"\n\n", "The End"};
  spec.params.stop_token_ids = {2, 9};
  spec.params.logprobs = 5;
  spec.params.logit_bias = {{42, -100.0f}, {7, 2.5f}, {8, std::numeric_limits<float>::infinity()}};
  spec.params.n = 3;
  spec.params.best_of = 4;
  spec.params.constraint = {output_constraint::kind::choice, "", {"red", "blue"}};
  spec.priority = -2;
  spec.num_speculative_tokens = 0;
  spec.echo = true;
  spec.tools = {{"ticket", "opens a ticket", "{\"type\":\"object\"}"}};
  spec.parallel_tool_calls = false;
  spec.enable_thinking = false;
  const auto s = round_trip(sys, spec);
  CHECK(s.prompt == spec.prompt);
  CHECK(s.prompt_ids == spec.prompt_ids);
  REQUIRE(s.messages.size() == 2);
  CHECK(s.messages[1].tool_calls.at(0).arguments == "{\"id\":3}");
  CHECK(s.params.seed == spec.params.seed);
  CHECK(s.params.stop == spec.params.stop);
  CHECK(s.params.logit_bias == spec.params.logit_bias);
  CHECK(s.params.constraint == spec.params.constraint);
  CHECK(s.params.best_of == 4);
  CHECK(s.priority == -2);
  CHECK(s.tools.at(0).parameters == "{\"type\":\"object\"}");
  CHECK_FALSE(s.enable_thinking);
  spec.params.seed.reset(); // no seed stays no seed (not 0)
  CHECK_FALSE(round_trip(sys, spec).params.seed.has_value());

  delta d;
  d.id = 99;
  d.index = 1;
  d.text = "caf\xc3\xa9";
  d.token_ids = {5, 6};
  // A banned token's logprob is -inf and a prompt's first is NaN: CAF's own float encoding loses the one
  // and never ends on the other (troupe/wire_bits.hpp).
  const float minus_inf = -std::numeric_limits<float>::infinity();
  d.logprobs = {{5, "caf", -0.5f, {{5, "caf", -0.5f}, {8, "cat", -1.25f}, {9, "x", minus_inf}}},
                {6, "\xc3\xa9", 1e-42f, {}}};
  d.prompt_logprobs = {{1, "<s>", std::nanf(""), {}}};
  d.prompt_text = "echo";
  d.sampled_ns = 123456789012345;
  d.tool_calls = {{"call_2", "f", "{}"}};
  d.tool_call_index = 2;
  d.finish_reason = "stop";
  const auto dd = round_trip(sys, d);
  CHECK(dd.text == d.text);
  CHECK(dd.logprobs.at(0).top.at(1).logprob == -1.25f);
  CHECK(dd.logprobs.at(0).top.at(2).logprob == minus_inf);
  CHECK(dd.logprobs.at(1).logprob == 1e-42f); // a subnormal stays itself
  CHECK(std::isnan(dd.prompt_logprobs.at(0).logprob));
  CHECK(dd.sampled_ns == d.sampled_ns);
  CHECK(dd.tool_calls.at(0).id == "call_2");
  CHECK(dd.finish_reason == "stop");

  finished f;
  f.id = 99;
  f.reason = "length";
  f.usage.completion_tokens = 17;
  f.timings.ttft_ms = 12.5;
  f.timings.tpot_ms = std::numeric_limits<double>::quiet_NaN(); // one token: no time per output token
  const auto ff = round_trip(sys, f);
  CHECK(std::isnan(ff.timings.tpot_ms));
  CHECK(ff.usage.completion_tokens == 17);
  CHECK(ff.timings.ttft_ms == 12.5);

  const auto fl = round_trip(sys, failed{7, "engine_unavailable", "gone"});
  CHECK(fl.code == "engine_unavailable");
  CHECK(fl.message == "gone");

  model_info info;
  info.name = "stories260k";
  info.max_model_len = 512;
  info.vocab_size = 512;
  CHECK(round_trip(sys, info).max_model_len == 512);

  engine_stats st;
  st.running = 3;
  st.device_blocks_free = 10;
  CHECK(round_trip(sys, st).running == 3);

  CHECK(round_trip(sys, std::vector<token_id>{1, -1, 31999}) == std::vector<token_id>{1, -1, 31999});
}

TEST_CASE("a published engine serves another actor system as it serves its own") {
  caf::actor_system_config a_cfg, b_cfg;
  caf::actor_system a{remote_ready(a_cfg)};
  caf::actor_system b{remote_ready(b_cfg)};
  const auto local = spawn_engine(a, stories_engine_config());
  const auto port = publish_engine(a, local, "127.0.0.1", 0);
  REQUIRE(port > 0);
  const auto remote = connect_engine(b, "127.0.0.1", port);

  const auto specs = mixed_requests();
  auto run = [&](caf::actor_system& sys, const engine_actor& engine) {
    engine_client client(sys, engine);
    std::vector<request_id> ids;
    for (const auto& s : specs) // one at a time: each alone in its batch, both times
    {
      ids.push_back(client.send(s));
      client.pump_until([&] { return client.ended(ids.back()); });
    }
    std::vector<request_outcome> out;
    for (auto id : ids)
      out.push_back(client.outcomes[id]);
    return out;
  };
  const auto here = run(a, local);
  const auto there = run(b, remote);
  REQUIRE(there.size() == here.size());
  for (std::size_t i = 0; i < here.size(); ++i) {
    INFO("request " << i);
    REQUIRE(there[i].finished);
    REQUIRE(there[i].choices.size() == here[i].choices.size());
    for (const auto& [index, choice] : here[i].choices) { // n > 1: the choices' deltas interleave as they come
      CHECK(there[i].choices.at(index).token_ids == choice.token_ids);
      CHECK(there[i].choices.at(index).text == choice.text);
    }
    CHECK(there[i].final.reason == here[i].final.reason);
    CHECK(there[i].final.usage.completion_tokens == here[i].final.usage.completion_tokens);
    REQUIRE(there[i].logprobs.size() == here[i].logprobs.size());
    for (std::size_t t = 0; t < here[i].logprobs.size(); ++t)
      CHECK(there[i].logprobs[t].logprob == here[i].logprobs[t].logprob);
  }
  CHECK(here[3].text.find("girl") == std::string::npos); // the stop string ended it

  caf::scoped_actor self{b};
  self->request(remote, std::chrono::seconds(30), info_atom::value)
      .receive([](model_info& i) { CHECK(i.name == "stories260k"); },
               [&](caf::error& e) { FAIL("info: " << b.render(e)); });
  self->request(remote, std::chrono::seconds(30), tokenize_atom::value, std::string("Once upon a time"), true)
      .receive(
          [&](std::vector<token_id>& ids) {
            REQUIRE(ids.size() > 1);
            self->request(remote, std::chrono::seconds(30), detok_atom::value, ids)
                .receive([](std::string& text) { CHECK(text.find("Once upon a time") != std::string::npos); },
                         [&](caf::error& e) { FAIL("detokenize: " << b.render(e)); });
          },
          [&](caf::error& e) { FAIL("tokenize: " << b.render(e)); });
  // A request the engine refuses is refused across the wire as well.
  self->request(remote, std::chrono::seconds(30), detok_atom::value, std::vector<token_id>{1 << 30})
      .receive([](std::string&) { FAIL("an id outside the vocabulary was detokenized"); },
               [](caf::error& e) { CHECK(e != caf::none); });
  caf::anon_send_exit(local, caf::exit_reason::user_shutdown);
}

TEST_CASE("connecting to a port where no engine listens, or publishing off loopback, fails with a clear error") {
  caf::actor_system_config cfg;
  caf::actor_system sys{remote_ready(cfg)};
  CHECK_THROWS_WITH_AS(connect_engine(sys, "127.0.0.1", 1), doctest::Contains("cannot reach an engine at 127.0.0.1:1"),
                       config_error);
  const auto engine = spawn_engine(sys, stories_engine_config());
  CHECK_THROWS_WITH_AS(publish_engine(sys, engine, "0.0.0.0", 0), doctest::Contains("is not a loopback address"),
                       config_error);
  CHECK_THROWS_WITH_AS(parse_engine_address("127.0.0.1", "router.engines"), doctest::Contains("has no port"),
                       config_error);
  CHECK_THROWS_WITH_AS(parse_engine_address(":7000", "router.engines"), doctest::Contains("has no host"), config_error);
  CHECK_THROWS_WITH_AS(parse_engine_address("127.0.0.1:70000", "router.engines"),
                       doctest::Contains("port outside 1-65535"), config_error);
  CHECK_THROWS_WITH_AS(parse_engine_address("host:x", "router.engines"), doctest::Contains("has no port number"),
                       config_error);
  CHECK(parse_engine_address("[::1]:7000", "x") == std::pair<std::string, std::uint16_t>{"::1", 7000});
  caf::anon_send_exit(engine, caf::exit_reason::user_shutdown);
}

TEST_CASE("an engine process killed under load fails its requests with engine_unavailable, and every later one") {
  engine_process engine;

  caf::actor_system_config cfg;
  caf::actor_system sys{remote_ready(cfg)};
  const auto remote = connect_engine(sys, "127.0.0.1", engine.port);
  event_log log;
  const auto bridge = net::spawn_bridge(sys, remote, log.push());
  auto long_request = greedy_spec("Once upon a time", 400);
  caf::anon_send(bridge, net::bridge_generate_atom::value, std::string("a"), long_request);
  caf::anon_send(bridge, net::bridge_generate_atom::value, std::string("b"), long_request);
  REQUIRE(log.has_delta("a", std::chrono::seconds(60)));

  const auto killed_at = std::chrono::steady_clock::now();
  engine.process.kill();
  for (const std::string tag : {"a", "b"}) {
    INFO(tag);
    const auto end = log.end_of(tag, std::chrono::seconds(10));
    REQUIRE(end);
    CHECK(end->what == net::bridge_event::kind::failed);
    CHECK(end->error.code == "engine_unavailable");
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  MESSAGE("both requests failed " << waited << " s after the kill");
  CHECK(waited < 5.0);

  // A request after the engine is gone fails at once, on this bridge and on a new one.
  caf::anon_send(bridge, net::bridge_generate_atom::value, std::string("c"), greedy_spec("Hi", 4));
  auto c = log.end_of("c", std::chrono::seconds(5));
  REQUIRE(c);
  CHECK(c->error.code == "engine_unavailable");
  event_log later;
  const auto fresh = net::spawn_bridge(sys, remote, later.push());
  caf::anon_send(fresh, net::bridge_generate_atom::value, std::string("d"), greedy_spec("Hi", 4));
  auto d = later.end_of("d", std::chrono::seconds(5));
  REQUIRE(d);
  CHECK(d->error.code == "engine_unavailable");
  caf::anon_send_exit(bridge, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(fresh, caf::exit_reason::user_shutdown);
}

TEST_CASE("an engine process that stops answering without closing its connection is given up within the timeout") {
  engine_process engine;
  caf::actor_system_config cfg;
  caf::actor_system sys{remote_ready(cfg)};
  const auto remote = connect_engine(sys, "127.0.0.1", engine.port);
  event_log log;
  const auto bridge = net::spawn_bridge(sys, remote, log.push());
  caf::anon_send(bridge, net::bridge_generate_atom::value, std::string("a"), greedy_spec("Once upon a time", 400));
  REQUIRE(log.has_delta("a", std::chrono::seconds(60)));
  // Frozen: the socket stays open, nothing more comes (a host that vanished looks the same from here).
  ::kill(engine.process.pid(), SIGSTOP);
  const auto frozen_at = std::chrono::steady_clock::now();
  const auto end = log.end_of("a", remote_engine_timeout + std::chrono::seconds(10));
  REQUIRE(end);
  CHECK(end->error.code == "engine_unavailable");
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - frozen_at).count();
  MESSAGE("given up " << waited << " s after the engine froze");
  CHECK(waited < std::chrono::duration<double>(remote_engine_timeout).count() + 3.0);
  engine.process.kill(); // SIGKILL ends a stopped process too
  caf::anon_send_exit(bridge, caf::exit_reason::user_shutdown);
}
