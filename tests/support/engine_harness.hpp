// Drives a troupe engine from a test: spawn it on the bundled model with
// config overrides, send generate requests with a scoped actor as the sink,
// and collect every delta, finished and failed.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/stories_model.hpp"
#include "troupe/engine.hpp"

namespace troupe::testing {

inline engine_config stories_engine_config() {
  engine_config c;
  c.model_path = stories_dir().string();
  c.cpu_threads = 1;
  return c;
}

struct request_outcome {
  std::string text;
  std::vector<token_id> token_ids;
  int deltas = 0;
  bool finished = false;
  troupe::finished final;
  bool failed = false;
  troupe::failed error;
};

// One actor system + engine per test.
struct engine_fixture {
  caf::actor_system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  engine_actor engine;

  explicit engine_fixture(const engine_config& cfg) : engine(spawn_engine(sys, cfg)) {}
  ~engine_fixture() { caf::anon_send_exit(engine, caf::exit_reason::user_shutdown); }

  // Sends every spec at once, then collects until each request has ended.
  std::vector<request_outcome> run(const std::vector<request_spec>& specs,
                                   std::chrono::seconds timeout = std::chrono::seconds(120)) {
    caf::scoped_actor self{sys};
    auto sink = caf::actor_cast<sink_actor>(self);
    std::map<request_id, std::size_t> index;
    for (std::size_t i = 0; i < specs.size(); ++i)
      self->request(engine, caf::infinite, generate_atom::value, specs[i], sink)
          .receive([&](request_id id) { index[id] = i; }, [&](caf::error& e) { FAIL("generate: " << to_string(e)); });
    std::vector<request_outcome> out(specs.size());
    std::size_t open = specs.size();
    while (open > 0) {
      bool got = false;
      self->receive(
          [&](delta& d) {
            got = true;
            auto& o = out.at(index.at(d.id));
            o.text += d.text;
            o.token_ids.insert(o.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
            ++o.deltas;
          },
          [&](troupe::finished& f) {
            got = true;
            auto& o = out.at(index.at(f.id));
            o.finished = true;
            o.final = f;
            --open;
          },
          [&](troupe::failed& f) {
            got = true;
            auto& o = out.at(index.at(f.id));
            o.failed = true;
            o.error = f;
            --open;
          },
          caf::after(timeout) >> [&] {});
      if (!got) {
        FAIL("timed out waiting for " << open << " requests");
        break;
      }
    }
    return out;
  }

  // Blocks come back with the step after a sequence ends: poll (bounded) until
  // the engine holds none, and return the stats it ended with.
  engine_stats settled_stats(std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      auto s = stats();
      bool idle = s.running == 0 && s.waiting == 0 && s.swapped == 0 && s.device_blocks_free == s.device_blocks_total;
      if (idle || std::chrono::steady_clock::now() > deadline)
        return s;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  engine_stats stats() {
    caf::scoped_actor self{sys};
    engine_stats s;
    self->request(engine, caf::infinite, stats_atom::value)
        .receive([&](engine_stats& x) { s = std::move(x); }, [&](caf::error& e) { FAIL("stats: " << to_string(e)); });
    return s;
  }
};

inline request_spec greedy_spec(std::string prompt, int max_tokens, bool ignore_eos = true) {
  request_spec s;
  s.prompt = std::move(prompt);
  s.params.temperature = 0;
  s.params.max_tokens = max_tokens;
  s.params.ignore_eos = ignore_eos;
  return s;
}

} // namespace troupe::testing
