// Drives a troupe engine from a test: spawn it on the bundled model with
// config overrides, send generate requests with a scoped actor as the sink,
// and collect every delta, finished and failed.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/stories_model.hpp"
#include "troupe/engine.hpp"

namespace troupe::testing {

// $TROUPE_TEST_TENSOR_PARALLEL=N runs every engine these tests start at N tensor-parallel ranks
// (the actor tests at N = 2 prove the protocols hold with ranks behind the executor; the GPU
// tests that start engines through on_one_gpu put the N ranks on GPU 0).
inline int test_tensor_parallel_size() {
  const char* env = std::getenv("TROUPE_TEST_TENSOR_PARALLEL");
  return env != nullptr && *env != '\0' ? std::stoi(env) : 1;
}

inline engine_config stories_engine_config() {
  engine_config c;
  c.model_path = stories_dir().string();
  c.cpu_threads = 1;
  c.tensor_parallel_size = test_tensor_parallel_size();
  return c;
}

// c on device=cuda; with several ranks, all on GPU 0 (they meet through peer loads; needs
// CUDA_MODULE_LOADING=EAGER and CUDA_DEVICE_MAX_CONNECTIONS=32) with a fixed pool, 256 blocks unless c fixes one.
inline engine_config on_one_gpu(engine_config c) {
  c.device = "cuda";
  c.tensor_parallel_devices.clear();
  if (c.tensor_parallel_size > 1) {
    for (int r = 0; r < c.tensor_parallel_size; ++r)
      c.tensor_parallel_devices += r == 0 ? "0" : ",0";
    if (c.num_device_blocks <= 0)
      c.num_device_blocks = 256;
  }
  return c;
}

// One choice of a request (n / best_of): what its deltas carried.
struct choice_outcome {
  std::string text;
  std::vector<token_id> token_ids;
  std::vector<token_logprob> logprobs;
  std::string prompt_text;
  std::size_t prompt_logprobs = 0;
  std::string finish_reason; // from its last delta
  int finish_deltas = 0;     // deltas that carried a finish_reason (exactly one per choice)
  std::vector<tool_call> tool_calls;
  int misnumbered_calls = 0; // deltas whose tool_call_index was not the calls seen before
};

// Everything a request's deltas carried, all choices together (in arrival order), and per choice.
struct request_outcome {
  std::map<int, choice_outcome> choices;
  std::string text;
  std::vector<token_id> token_ids;
  std::vector<token_logprob> logprobs;        // when the request asked
  std::vector<token_logprob> prompt_logprobs; // when the request asked
  std::string prompt_text;                    // echo
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
                                   std::chrono::seconds timeout = std::chrono::seconds(120));

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

  // Polls (bounded) until the stats satisfy `ready`; returns the last ones seen.
  template <class Predicate>
  engine_stats wait_for_stats(Predicate ready, std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      auto s = stats();
      if (ready(s) || std::chrono::steady_clock::now() > deadline)
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

// A client of one engine: sends requests, pumps the sink's mailbox, and keeps
// each request's outcome and the order in which requests ended.
struct engine_client {
  caf::scoped_actor self;
  engine_actor engine;
  std::map<request_id, request_outcome> outcomes;
  std::vector<request_id> end_order;

  engine_client(caf::actor_system& sys, engine_actor e) : self(sys), engine(std::move(e)) {}

  request_id send(const request_spec& spec) {
    request_id id = 0;
    self->request(engine, caf::infinite, generate_atom::value, spec, caf::actor_cast<sink_actor>(self))
        .receive([&](request_id x) { id = x; }, [&](caf::error& e) { FAIL("generate: " << to_string(e)); });
    outcomes[id];
    return id;
  }

  bool ended(request_id id) { return outcomes[id].finished || outcomes[id].failed; }

  // Handles one message; false on timeout.
  bool pump_one(std::chrono::milliseconds timeout) {
    bool got = false;
    self->receive(
        [&](delta& d) {
          got = true;
          auto& o = outcomes[d.id];
          o.text += d.text;
          o.token_ids.insert(o.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
          o.logprobs.insert(o.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
          o.prompt_logprobs.insert(o.prompt_logprobs.end(), d.prompt_logprobs.begin(), d.prompt_logprobs.end());
          o.prompt_text += d.prompt_text;
          ++o.deltas;
          auto& c = o.choices[d.index];
          c.text += d.text;
          c.token_ids.insert(c.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
          c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
          c.prompt_text += d.prompt_text;
          c.prompt_logprobs += d.prompt_logprobs.size();
          if (!d.tool_calls.empty() && d.tool_call_index != static_cast<int>(c.tool_calls.size()))
            ++c.misnumbered_calls;
          c.tool_calls.insert(c.tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
          if (!d.finish_reason.empty()) {
            c.finish_reason = d.finish_reason;
            ++c.finish_deltas;
          }
        },
        [&](troupe::finished& f) {
          got = true;
          outcomes[f.id].finished = true;
          outcomes[f.id].final = f;
          end_order.push_back(f.id);
        },
        [&](troupe::failed& f) {
          got = true;
          outcomes[f.id].failed = true;
          outcomes[f.id].error = f;
          end_order.push_back(f.id);
        },
        caf::after(timeout) >> [] {});
    return got;
  }

  // Pumps until done() holds; FAILs (and returns false) after `limit` without progress.
  template <class Predicate>
  bool pump_until(Predicate done, std::chrono::milliseconds limit = std::chrono::milliseconds(120000)) {
    while (!done())
      if (!pump_one(limit)) {
        FAIL("timed out waiting for the engine");
        return false;
      }
    return true;
  }
};

inline std::vector<request_outcome> engine_fixture::run(const std::vector<request_spec>& specs,
                                                        std::chrono::seconds timeout) {
  engine_client client(sys, engine);
  std::vector<request_id> ids;
  for (const auto& s : specs)
    ids.push_back(client.send(s));
  client.pump_until(
      [&] {
        for (auto id : ids)
          if (!client.ended(id))
            return false;
        return true;
      },
      timeout);
  std::vector<request_outcome> out;
  for (auto id : ids)
    out.push_back(client.outcomes[id]);
  return out;
}

// A prompt of n ids from the golden texts (BOS, then a real story's valid tokens).
inline std::vector<token_id> story_prompt(std::size_t n) {
  auto golden = read_json(stories_dir() / "golden_greedy.json");
  std::vector<token_id> ids{1};
  while (ids.size() < n)
    for (const auto& c : golden.at("cases").as_array())
      for (auto t : json_array<token_id>(c.at("generated_ids")))
        if (ids.size() < n)
          ids.push_back(t);
  return ids;
}

inline request_spec greedy_spec(std::string prompt, int max_tokens, bool ignore_eos = true) {
  request_spec s;
  s.prompt = std::move(prompt);
  s.params.temperature = 0;
  s.params.max_tokens = max_tokens;
  s.params.ignore_eos = ignore_eos;
  return s;
}

} // namespace troupe::testing
