// The host sampler's time per step of 12 rows (runtime::sampler::sample), for the cuts clients
// use, on peaked rows (300 tokens raised well above the rest: what a trained model's rows look
// like) and flat ones (N(0, 1) logits: the worst case for top-p, whose nucleus is most of the
// row). Median, min and max over --runs runs; prints a markdown table.
//
// Usage: bench_host_sampler [--runs N] [--vocab V]   (default 9 runs, vocabularies 32,000 and 128,256)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/sampler.hpp"

namespace rt = troupe::runtime;

namespace {

std::vector<float> make_rows(int rows, int vocab, bool peaked, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> raise(4.0f, 10.0f);
  std::uniform_int_distribution<int> token(0, vocab - 1);
  std::vector<float> out(static_cast<std::size_t>(rows) * vocab);
  for (int r = 0; r < rows; ++r) {
    float* row = out.data() + static_cast<std::size_t>(r) * vocab;
    for (int i = 0; i < vocab; ++i)
      row[i] = normal(g);
    if (peaked)
      for (int j = 0; j < 300; ++j)
        row[token(g)] += raise(g);
  }
  return out;
}

rt::sampler_settings cuts(float top_p, int top_k, float min_p) {
  rt::sampling_params p;
  p.temperature = 0.8f;
  p.top_p = top_p;
  p.top_k = top_k;
  p.min_p = min_p;
  return p;
}

} // namespace

int main(int argc, char** argv) {
  int runs = 9, only_vocab = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--runs")
      runs = std::max(1, std::stoi(argv[i + 1]));
    else if (a == "--vocab")
      only_vocab = std::stoi(argv[i + 1]);
  }
  constexpr int rows = 12;
  const std::pair<const char*, rt::sampler_settings> settings[] = {{"temperature 0.8", cuts(1.0f, 0, 0.0f)},
                                                                   {"top-p 0.9", cuts(0.9f, 0, 0.0f)},
                                                                   {"top-k 50", cuts(1.0f, 50, 0.0f)},
                                                                   {"min-p 0.05", cuts(1.0f, 0, 0.05f)},
                                                                   {"top-k 50 + top-p 0.9", cuts(0.9f, 50, 0.0f)}};
  std::printf("| rows | vocab | logits | cut | median ms | min-max | runs |\n|---|---:|---|---|---:|---:|---:|\n");
  rt::sampler s;
  unsigned long long sink = 0;
  for (int vocab : {32000, 128256}) {
    if (only_vocab && vocab != only_vocab)
      continue;
    for (bool peaked : {true, false}) {
      const auto source = make_rows(rows, vocab, peaked, 42u + static_cast<unsigned>(vocab) + peaked);
      std::vector<float> work(source.size());
      for (const auto& [name, p] : settings) {
        std::vector<double> ms;
        for (int run = 0; run < runs; ++run) {
          std::memcpy(work.data(), source.data(), source.size() * sizeof(float)); // sample() edits rows in place
          const auto t0 = std::chrono::steady_clock::now();
          for (int r = 0; r < rows; ++r)
            sink += static_cast<unsigned long long>(
                s.sample(std::span<float>(work).subspan(static_cast<std::size_t>(r) * vocab, vocab), p, {}, {},
                         1234 + r, static_cast<std::uint64_t>(run)));
          ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(ms.begin(), ms.end());
        std::printf("| %d | %d | %s | %s | %.2f | %.2f-%.2f | %d |\n", rows, vocab, peaked ? "peaked" : "flat N(0,1)",
                    name, ms[ms.size() / 2], ms.front(), ms.back(), runs);
      }
    }
  }
  std::fprintf(stderr, "(checksum %llu)\n", sink % 1000);
}
