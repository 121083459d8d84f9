// Speculative decoding on the CPU backend with the bundled model: acceptance
// rate, mean accepted length and tokens/s for k = 1..5, with self-speculation
// (the model's first 1, 2, 3 layers) and n-gram lookup, on a repetitive and a
// non-repetitive prompt, against plain decoding; and the per-step cost of the
// protocol (host time outside model, draft and verifier; the verifier itself).
// One greedy request of 256 tokens per row (ignore_eos). Prints a markdown table.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "troupe/engine.hpp"

namespace {

double median(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct row {
  double tokens_per_s = 0;
  troupe::engine_stats stats;
};

row run(caf::actor_system& sys, troupe::engine_config cfg, const std::string& prompt, int tokens) {
  cfg.cpu_threads = 1;
  auto engine = troupe::spawn_engine(sys, cfg);
  caf::scoped_actor self{sys};
  auto sink = caf::actor_cast<troupe::sink_actor>(self);
  troupe::request_spec s;
  s.prompt = prompt;
  s.params.temperature = 0;
  s.params.max_tokens = tokens;
  s.params.ignore_eos = true;
  auto t0 = std::chrono::steady_clock::now();
  self->send(engine, troupe::generate_atom::value, s, sink);
  bool open = true;
  while (open)
    self->receive([](troupe::request_id) {}, [](const troupe::delta&) {}, [&](const troupe::finished&) { open = false; },
                  [&](const troupe::failed& f) {
                    std::fprintf(stderr, "failed: %s\n", f.message.c_str());
                    open = false;
                  });
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  row r;
  r.tokens_per_s = tokens / secs;
  self->request(engine, caf::infinite, troupe::stats_atom::value)
      .receive([&](troupe::engine_stats& st) { r.stats = std::move(st); }, [](caf::error&) {});
  caf::anon_send_exit(engine, caf::exit_reason::user_shutdown);
  return r;
}

} // namespace

int main(int argc, char** argv) {
  std::string model = argc > 1 ? argv[1] : "models/stories260k";
  const int tokens = 256;
  caf::actor_system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  const std::pair<const char*, std::string> prompts[] = {
      {"repetitive", "The cat sat on the mat. The dog sat on the log. The cat sat on the mat. The dog sat on the log."},
      {"story", "Once upon a time"}};
  std::printf("| prompt | method | k | tokens/s | vs plain | acceptance | accepted/verification | tokens/step | "
              "protocol us/step (median) | verify us | draft us |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& [name, prompt] : prompts) {
    troupe::engine_config base;
    base.model_path = model;
    // Warm the caches and the page table once; the first engine start is slower.
    run(sys, base, prompt, 16);
    auto plain = run(sys, base, prompt, tokens);
    std::printf("| %s | none | 0 | %.0f | 1.00 | | | 1.00 | %.1f | | |\n", name, plain.tokens_per_s,
                median(plain.stats.host_overhead_us));
    struct method {
      const char* label;
      std::string name;
      int layers;
    };
    const method methods[] = {{"self-1", "self", 1}, {"self-2", "self", 2}, {"self-3", "self", 3}, {"ngram", "ngram", 0}};
    for (const auto& m : methods)
      for (int k = 1; k <= 6; ++k) {
        // Rows k = 1..5 with a fixed k; the last row is k <= 5 adapted per sequence.
        const bool adaptive = k == 6;
        auto cfg = base;
        cfg.speculative_method = m.name;
        cfg.draft_layers = std::max(1, m.layers);
        cfg.num_speculative_tokens = adaptive ? 5 : k;
        cfg.adaptive_speculation = adaptive;
        auto r = run(sys, cfg, prompt, tokens);
        const auto& s = r.stats;
        const double verifs = static_cast<double>(std::max<std::uint64_t>(1, s.spec_verifications));
        std::printf("| %s | %s | %s | %.0f | %.2f | %.3f | %.2f | %.2f | %.1f | %.1f | %.1f |\n", name, m.label,
                    adaptive ? "adaptive <= 5" : std::to_string(k).c_str(),
                    r.tokens_per_s, r.tokens_per_s / plain.tokens_per_s,
                    s.spec_drafted ? static_cast<double>(s.spec_accepted) / static_cast<double>(s.spec_drafted) : 0.0,
                    static_cast<double>(s.spec_accepted) / verifs,
                    static_cast<double>(tokens) / static_cast<double>(std::max<std::uint64_t>(1, s.steps)),
                    median(s.host_overhead_us), median(s.verify_us), median(s.draft_us));
      }
  }
  return 0;
}
