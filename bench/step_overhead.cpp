// Host overhead per engine step on the CPU backend: the time a step spends
// outside the model runner and the sampler (planning, KV reservation, actor
// messages, fan-out), at batch 1, 8 and 32 decoding sequences. This is the
// time a GPU would sit idle between steps. Prints a markdown table.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "troupe/engine.hpp"

namespace {

double percentile(std::vector<double> v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

struct result {
  int batch;
  std::size_t steps;
  double median_us, p99_us;
};

result measure(caf::actor_system& sys, const std::string& model, int batch) {
  troupe::engine_config cfg;
  cfg.model_path = model;
  cfg.cpu_threads = 1;
  cfg.max_num_seqs = batch;
  auto engine = troupe::spawn_engine(sys, cfg);
  caf::scoped_actor self{sys};
  auto sink = caf::actor_cast<troupe::sink_actor>(self);
  const char* prompts[] = {"Once upon a time", "The little dog", "One day", "The sun was"};
  for (int i = 0; i < batch; ++i) {
    troupe::request_spec s;
    s.prompt = prompts[i % 4];
    s.params.temperature = 0;
    s.params.max_tokens = 200;
    s.params.ignore_eos = true;
    self->send(engine, troupe::generate_atom::value, s, sink);
  }
  int open = batch;
  while (open > 0)
    self->receive([](troupe::request_id) {}, [](const troupe::delta&) {},
                  [&](const troupe::finished&) { --open; }, [&](const troupe::failed&) { --open; });
  troupe::engine_stats stats;
  self->request(engine, caf::infinite, troupe::stats_atom::value)
      .receive([&](troupe::engine_stats& s) { stats = std::move(s); }, [](caf::error&) {});
  caf::anon_send_exit(engine, caf::exit_reason::user_shutdown);
  return {batch, stats.host_overhead_us.size(), percentile(stats.host_overhead_us, 0.5),
          percentile(stats.host_overhead_us, 0.99)};
}

} // namespace

int main(int argc, char** argv) {
  std::string model = argc > 1 ? argv[1] : "models/stories260k";
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  std::printf("| batch | steps | host overhead median (us) | P99 (us) |\n|---|---|---|---|\n");
  for (int batch : {1, 8, 32}) {
    auto r = measure(sys, model, batch);
    std::printf("| %d | %zu | %.1f | %.1f |\n", r.batch, r.steps, r.median_us, r.p99_us);
  }
  return 0;
}
