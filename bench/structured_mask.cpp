// Structured output's host cost per token (issue 42): a constrained sequence walks a JSON schema
// with random allowed tokens, and each step's banned list (runtime::structured::sequence_constraint)
// is timed; first visits of a parse state (the trie walk) and repeats (memoized masks) apart. Also
// the schema's compile time, and the compile time (with the start state's mask, as admission
// does) over 2,000 random schemas of tests/support/random_schema.hpp. Vocabularies: GPT-2's 50,257 tokens, and a 128k byte-level one made
// of GPT-2's tokens plus pairs of them (the size of Llama-3's). Prints a markdown table.
//
// Usage: bench_structured_mask [--runs N] [--tokenizer DIR]   (default 5 runs, tests/data/gpt2 found
// from the binary's folder upwards)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "bench/order_schema.hpp"
#include "runtime/structured/constraint_cache.hpp"
#include "runtime/structured/sequence_constraint.hpp"
#include "runtime/tokenizer.hpp"
#include "tests/support/random_schema.hpp"

namespace rs = troupe::runtime::structured;
namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

namespace {

const char* schema = troupe::bench::order_schema;

fs::path find_gpt2() {
  for (fs::path dir = fs::read_symlink("/proc/self/exe").parent_path(); !dir.empty(); dir = dir.parent_path()) {
    if (fs::exists(dir / "tests/data/gpt2/tokenizer.json"))
      return dir / "tests/data/gpt2";
    if (dir == dir.root_path())
      break;
  }
  return {};
}

double percentile(std::vector<double> v, double q) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

struct run_result {
  double compile_ms = 0;
  std::vector<double> cold_us, warm_us;
};

// One constrained generation of random allowed tokens until the stop id is allowed and drawn.
run_result run_once(std::shared_ptr<const rs::token_vocabulary> vocab, unsigned seed) {
  run_result r;
  rs::constraint_cache cache(vocab);
  const auto t0 = clock_type::now();
  auto compiled = cache.get({troupe::output_constraint::kind::json_schema, schema, {}});
  r.compile_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
  rs::sequence_constraint seq(compiled);
  const std::vector<troupe::token_id> stops{vocab->size() - 1};
  std::vector<troupe::token_id> output, banned, allowed;
  std::mt19937 rng(seed);
  std::size_t masks_before = 0;
  for (int step = 0; step < 400; ++step) {
    const auto t = clock_type::now();
    seq.banned_after(output, stops, banned);
    const double us = std::chrono::duration<double, std::micro>(clock_type::now() - t).count();
    allowed.clear();
    std::size_t b = 0;
    for (troupe::token_id id = 0; id < vocab->size(); ++id) {
      if (b < banned.size() && banned[b] == id) {
        ++b;
        continue;
      }
      allowed.push_back(id);
    }
    // A state seen before finds its mask memoized: cold steps are those that grew the cache.
    const std::size_t masks_now = compiled->cached_masks();
    (masks_now > masks_before ? r.cold_us : r.warm_us).push_back(us);
    masks_before = masks_now;
    if (allowed.empty())
      break;
    // Prefer ending once allowed half the time, so outputs stay short; else a random allowed token.
    const bool can_stop = std::find(allowed.begin(), allowed.end(), stops[0]) != allowed.end();
    if (can_stop && rng() % 2 == 0)
      break;
    troupe::token_id next = allowed[rng() % allowed.size()];
    if (next == stops[0])
      break;
    output.push_back(next);
  }
  return r;
}

} // namespace

int main(int argc, char** argv) {
  int runs = 5;
  fs::path tokenizer_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--runs")
      runs = std::max(1, std::stoi(argv[i + 1]));
    else if (a == "--tokenizer")
      tokenizer_dir = argv[i + 1];
  }
  if (tokenizer_dir.empty())
    tokenizer_dir = find_gpt2();
  if (tokenizer_dir.empty()) {
    std::fprintf(stderr, "bench_structured_mask: no tests/data/gpt2 above the binary; pass --tokenizer DIR\n");
    return 2;
  }
  const auto tok = troupe::runtime::tokenizer::load(tokenizer_dir);
  const int gpt2_size = static_cast<int>(tok.vocab_size());
  std::vector<std::optional<std::string>> base;
  for (int id = 0; id < gpt2_size; ++id)
    base.push_back(tok.token_bytes(id));
  // 128k: GPT-2's tokens, then pairs of common ones (ids below 4000), then a stop token.
  std::vector<std::optional<std::string>> big = base;
  std::mt19937 rng(1);
  while (big.size() < 128'255) {
    const auto& a = base[rng() % 4000];
    const auto& b = base[rng() % 4000];
    if (a && b)
      big.emplace_back(*a + *b);
  }
  base.emplace_back(std::nullopt); // the stop id: no bytes
  big.emplace_back(std::nullopt);
  const std::pair<const char*, std::shared_ptr<const rs::token_vocabulary>> vocabs[] = {
      {"GPT-2 (50,258)", std::make_shared<const rs::token_vocabulary>(base)},
      {"byte-level 128k (128,256)", std::make_shared<const rs::token_vocabulary>(big)}};

  std::printf(
      "| vocabulary | compile ms | first visit of a state: mask µs median (P99) | repeat: mask µs median "
      "(P99) | steps (first/repeat) |\n|---|---|---|---|---|\n");
  for (const auto& [name, vocab] : vocabs) {
    std::vector<double> compile, cold_median, cold_p99, warm_median, warm_p99;
    std::size_t cold_n = 0, warm_n = 0;
    for (int r = 0; r < runs; ++r) {
      const auto res = run_once(vocab, static_cast<unsigned>(r + 1));
      compile.push_back(res.compile_ms);
      cold_median.push_back(percentile(res.cold_us, 0.5));
      cold_p99.push_back(percentile(res.cold_us, 0.99));
      warm_median.push_back(percentile(res.warm_us, 0.5));
      warm_p99.push_back(percentile(res.warm_us, 0.99));
      cold_n += res.cold_us.size();
      warm_n += res.warm_us.size();
    }
    auto span = [](const std::vector<double>& v) {
      return std::to_string(percentile(v, 0.5)).substr(0, 7) + " [" +
             std::to_string(*std::min_element(v.begin(), v.end())).substr(0, 7) + "–" +
             std::to_string(*std::max_element(v.begin(), v.end())).substr(0, 7) + "]";
    };
    std::printf("| %s | %s | %s (%s) | %s (%s) | %zu/%zu |\n", name, span(compile).c_str(), span(cold_median).c_str(),
                span(cold_p99).c_str(), span(warm_median).c_str(), span(warm_p99).c_str(), cold_n, warm_n);
  }
  std::printf("\n%d runs each (median [min–max] over runs of each run's median / P99); schema: an order with items.\n",
              runs);
  // Compile time over random schemas: what an uncached schema adds to its request's admission.
  std::printf("\n| vocabulary | random schemas compiled | compile ms median | P99 | max |\n|---|---|---|---|---|\n");
  for (const auto& [name, vocab] : vocabs) {
    std::vector<double> medians, p99s, maxes;
    for (int r = 0; r < runs; ++r) {
      troupe::test::random_schema gen(static_cast<std::uint64_t>(100 + r));
      rs::constraint_cache cache(vocab, 4);
      std::vector<double> ms;
      for (int i = 0; i < 2000; ++i) {
        const auto text = boost::json::serialize(gen.next());
        const auto t0 = clock_type::now();
        try {
          cache.get({troupe::output_constraint::kind::json_schema, text, {}});
        } catch (const std::exception&) {
          continue; // a schema no output of this vocabulary satisfies: refused, not timed
        }
        ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
      }
      medians.push_back(percentile(ms, 0.5));
      p99s.push_back(percentile(ms, 0.99));
      maxes.push_back(percentile(ms, 1.0));
    }
    auto show = [](const std::vector<double>& v) {
      return std::to_string(percentile(v, 0.5)).substr(0, 6) + " [" +
             std::to_string(*std::min_element(v.begin(), v.end())).substr(0, 6) + "–" +
             std::to_string(*std::max_element(v.begin(), v.end())).substr(0, 6) + "]";
    };
    std::printf("| %s | 2000 x %d runs | %s | %s | %s |\n", name, runs, show(medians).c_str(), show(p99s).c_str(),
                show(maxes).c_str());
  }
  return 0;
}
