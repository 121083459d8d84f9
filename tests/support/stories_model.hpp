// Test helpers around the bundled stories260k model: load it once per test
// binary, read its golden files, and build step batches over a chosen layout.
#pragma once

#include <boost/json.hpp>

#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_model_runner.hpp"
#include "runtime/model_config.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/safetensors.hpp"
#include "tests/support/data_root.hpp"
#include "tests/support/float_compare.hpp"

namespace troupe::testing {

inline boost::json::value read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return boost::json::parse(text.str());
}

template <class T>
std::vector<T> json_array(const boost::json::value& v) {
  std::vector<T> out;
  for (const auto& x : v.as_array())
    out.push_back(boost::json::value_to<T>(x));
  return out;
}

struct loaded_model {
  runtime::model_config config;
  runtime::model_weights weights;
};

inline const loaded_model& stories_model() {
  static const loaded_model model = [] {
    auto cfg = runtime::load_model_config(stories_dir());
    auto store = runtime::tensor_store::open(stories_dir());
    return loaded_model{cfg, runtime::load_model_weights(store, cfg)};
  }();
  return model;
}

inline std::unique_ptr<runtime::cpu_model_runner> make_runner(int block_size, int num_blocks, std::size_t threads = 1) {
  const auto& m = stories_model();
  return std::make_unique<runtime::cpu_model_runner>(m.config, m.weights,
                                                     runtime::kv_cache_config{num_blocks, block_size}, threads);
}

// A block table for `tokens` positions, drawn from a shuffled pool so that
// physical blocks are neither contiguous nor in order.
inline std::vector<std::int32_t> scattered_blocks(int tokens, int block_size, std::vector<std::int32_t>& pool) {
  int n = (tokens + block_size - 1) / block_size;
  std::vector<std::int32_t> table(pool.end() - n, pool.end());
  pool.resize(pool.size() - n);
  return table;
}

inline std::vector<std::int32_t> shuffled_pool(int num_blocks, unsigned seed) {
  std::vector<std::int32_t> pool(num_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(seed));
  return pool;
}

} // namespace troupe::testing
