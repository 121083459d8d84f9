// Tensor parallelism on the CPU: the shard shapes and the widths a model refuses, the shard
// pieces as slices of the whole tensors, the shared-memory collective's rank-order sum, and
// N ranks on N threads computing the logits of one runner over the whole model — on the
// bundled stories260k and on a random GQA model with q/k/v biases and an untied LM head —
// whether ranks 1..N-1 execute or follow (as the rank executor actors drive them).
//
// Tolerance: the ranks' partial sums of o_proj, down_proj meet in a different order than one
// runner's dot products, so the logits may differ by fp32 rounding only:
//   |ranks' logit - one runner's logit| <= 1e-5 * max |logit| of the step,
// and every row's argmax (the greedy token) is the same.
#include <doctest/doctest.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <exception>
#include <random>
#include <string>
#include <thread>

#include "runtime/cpu/shared_memory_collective.hpp"
#include "runtime/shard_shape.hpp"
#include "runtime/step_batch_builder.hpp"
#include "runtime/weight_shard.hpp"
#include "tests/support/rank_threads.hpp"
#include "tests/support/stories_model.hpp"
#include "troupe/errors.hpp"

using namespace troupe;
using namespace troupe::testing;
using runtime::token_id;

namespace {

constexpr float relative_tolerance = 1e-5f;

// A small Qwen2-like model with GQA (8 query heads, 2 kv heads), q/k/v biases, an untied LM
// head and a vocabulary that 4 and 8 ranks cannot split evenly.
runtime::model_config gqa_config() {
  runtime::model_config c;
  c.architecture = "Qwen2ForCausalLM";
  c.model_type = "qwen2";
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.vocab_size = 250;
  c.max_position_embeddings = 256;
  c.rms_norm_eps = 1e-5f;
  c.attention_bias = true;
  c.tie_word_embeddings = false;
  return c;
}

runtime::model_weights random_weights(const runtime::model_config& c, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random = [&](std::size_t n, float scale, float offset = 0.0f) {
    std::vector<float> v(n);
    for (auto& x : v)
      x = offset + scale * normal(rng);
    return v;
  };
  const std::size_t hidden = c.hidden_size, q = c.num_attention_heads * c.head_dim,
                    kv = c.num_key_value_heads * c.head_dim, inter = c.intermediate_size, vocab = c.vocab_size;
  runtime::model_weights w;
  w.embed_tokens = random(vocab * hidden, 1.0f);
  w.final_norm = random(hidden, 0.1f, 1.0f);
  w.lm_head = random(vocab * hidden, 0.1f);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    runtime::layer_weights layer;
    layer.input_norm = random(hidden, 0.1f, 1.0f);
    layer.q_proj = random(q * hidden, 0.1f);
    layer.k_proj = random(kv * hidden, 0.1f);
    layer.v_proj = random(kv * hidden, 0.1f);
    layer.q_bias = random(q, 0.1f);
    layer.k_bias = random(kv, 0.1f);
    layer.v_bias = random(kv, 0.1f);
    layer.o_proj = random(hidden * q, 0.1f);
    layer.post_attention_norm = random(hidden, 0.1f, 1.0f);
    layer.gate_proj = random(inter * hidden, 0.1f);
    layer.up_proj = random(inter * hidden, 0.1f);
    layer.down_proj = random(hidden * inter, 0.1f);
    w.layers.push_back(std::move(layer));
  }
  return w;
}

const runtime::model_weights& gqa_weights() {
  static const runtime::model_weights w = random_weights(gqa_config(), 38);
  return w;
}

runtime::model_config heads_config(int heads, int kv_heads, int intermediate, int vocab) {
  runtime::model_config c = gqa_config();
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.intermediate_size = intermediate;
  c.vocab_size = vocab;
  return c;
}

std::string refusal(const runtime::model_config& model, int ranks) {
  try {
    runtime::shard_shapes(model, ranks);
  } catch (const config_error& e) {
    return e.what();
  }
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Element (row, col) of a row-major matrix with `columns` columns.
float at(const std::vector<float>& m, std::size_t columns, std::size_t row, std::size_t col) {
  return m[row * columns + col];
}

// True when `piece` [count, columns] is rows [begin, begin + count) of `whole` [*, columns].
bool is_row_slice(const std::vector<float>& piece, const std::vector<float>& whole, std::size_t columns,
                  std::size_t begin, std::size_t count) {
  if (piece.size() != count * columns)
    return false;
  for (std::size_t r = 0; r < count; ++r)
    for (std::size_t c = 0; c < columns; ++c)
      if (at(piece, columns, r, c) != at(whole, columns, begin + r, c))
        return false;
  return true;
}
// True when `piece` [rows, count] is columns [begin, begin + count) of `whole` [rows, columns].
bool is_column_slice(const std::vector<float>& piece, const std::vector<float>& whole, std::size_t columns,
                     std::size_t begin, std::size_t count) {
  const std::size_t rows = whole.size() / columns;
  if (piece.size() != rows * count)
    return false;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < count; ++c)
      if (at(piece, count, r, c) != at(whole, columns, r, begin + c))
        return false;
  return true;
}

void check_shard_pieces(const runtime::model_config& m, const runtime::model_weights& full, int ranks) {
  const std::size_t hidden = m.hidden_size, hd = m.head_dim;
  const std::vector<float> output(full.output_projection().begin(), full.output_projection().end());
  for (const auto& s : runtime::shard_shapes(m, ranks)) {
    CAPTURE(ranks);
    CAPTURE(s.rank);
    const auto shard = runtime::shard_weights(full, m, s);
    CHECK(shard.embed_tokens == full.embed_tokens);
    CHECK(shard.final_norm == full.final_norm);
    CHECK(is_row_slice(shard.lm_head, output, hidden, s.vocab_begin, s.vocab));
    REQUIRE(shard.layers.size() == full.layers.size());
    for (std::size_t l = 0; l < full.layers.size(); ++l) {
      const auto &a = shard.layers[l], &w = full.layers[l];
      CHECK(a.input_norm == w.input_norm);
      CHECK(a.post_attention_norm == w.post_attention_norm);
      CHECK(is_row_slice(a.q_proj, w.q_proj, hidden, s.q_head_begin * hd, s.q_heads * hd));
      CHECK(is_row_slice(a.k_proj, w.k_proj, hidden, s.kv_head_begin * hd, s.kv_heads * hd));
      CHECK(is_row_slice(a.v_proj, w.v_proj, hidden, s.kv_head_begin * hd, s.kv_heads * hd));
      if (m.attention_bias) {
        CHECK(is_row_slice(a.q_bias, w.q_bias, 1, s.q_head_begin * hd, s.q_heads * hd));
        CHECK(is_row_slice(a.k_bias, w.k_bias, 1, s.kv_head_begin * hd, s.kv_heads * hd));
        CHECK(is_row_slice(a.v_bias, w.v_bias, 1, s.kv_head_begin * hd, s.kv_heads * hd));
      } else {
        CHECK((a.q_bias.empty() && a.k_bias.empty() && a.v_bias.empty()));
      }
      CHECK(is_column_slice(a.o_proj, w.o_proj, m.num_attention_heads * hd, s.q_head_begin * hd, s.q_heads * hd));
      CHECK(is_row_slice(a.gate_proj, w.gate_proj, hidden, s.intermediate_begin, s.intermediate));
      CHECK(is_row_slice(a.up_proj, w.up_proj, hidden, s.intermediate_begin, s.intermediate));
      CHECK(is_column_slice(a.down_proj, w.down_proj, m.intermediate_size, s.intermediate_begin, s.intermediate));
    }
  }
}

// Steps over two sequences in scattered blocks: A's whole prompt (logits for every row) beside
// the first half of B's prompt (no logits), then B's rest beside A's first decode token, then
// `decodes` steps that decode both. The decode tokens are the whole model's greedy choices, so
// the steps are the same for every width; `logits` receives the whole model's logits per step.
struct scripted_steps {
  std::vector<runtime::step_batch> steps;
  std::vector<std::vector<float>> logits;
};

std::size_t argmax(std::span<const float> row) {
  return static_cast<std::size_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

scripted_steps greedy_steps(runtime::model_runner& whole, std::vector<token_id> a, std::vector<token_id> b, int decodes,
                            unsigned seed) {
  const int bs = whole.cache_config().block_size, vocab = whole.config().vocab_size;
  const int max_len = static_cast<int>(std::max(a.size(), b.size())) + decodes + 1;
  const int table_blocks = (max_len + bs - 1) / bs;
  auto pool = shuffled_pool(whole.cache_config().num_blocks, seed);
  const auto table_a = scattered_blocks(max_len, bs, pool), table_b = scattered_blocks(max_len, bs, pool);
  scripted_steps out;
  auto run = [&](runtime::step_batch batch) {
    std::vector<float> logits(batch.logits_rows.size() * vocab);
    whole.execute(batch, logits);
    out.steps.push_back(std::move(batch));
    out.logits.push_back(std::move(logits));
    return std::span<const float>(out.logits.back());
  };
  auto next_token = [&](std::span<const float> logits, std::size_t row) {
    return static_cast<token_id>(argmax(logits.subspan(row * vocab, vocab)));
  };

  const int b_half = static_cast<int>(b.size()) / 2;
  runtime::step_batch_builder first(bs, table_blocks);
  first.add(a, 0, table_a, static_cast<int>(a.size()));
  first.add(std::span(b).first(b_half), 0, table_b, 0);
  auto logits = run(first.take(0));
  a.push_back(next_token(logits, a.size() - 1));

  runtime::step_batch_builder second(bs, table_blocks);
  second.add(std::span(a).last(1), static_cast<int>(a.size()) - 1, table_a, 1);
  second.add(std::span(b).subspan(b_half), b_half, table_b, 1);
  logits = run(second.take(1));
  a.push_back(next_token(logits, 0));
  b.push_back(next_token(logits, 1));

  for (int d = 0; d < decodes; ++d) {
    runtime::step_batch_builder step(bs, table_blocks);
    step.add(std::span(a).last(1), static_cast<int>(a.size()) - 1, table_a, 1);
    step.add(std::span(b).last(1), static_cast<int>(b.size()) - 1, table_b, 1);
    logits = run(step.take(static_cast<std::uint64_t>(d + 2)));
    a.push_back(next_token(logits, 0));
    b.push_back(next_token(logits, 1));
  }
  return out;
}

// Runs `steps` on `ranks` runners, one thread each, over their shards and a shared-memory group,
// as the executor actors drive them; returns each rank's logits per step. With `follow`, ranks
// 1..N-1 run follow_step (as rank executors do) and only rank 0's logits come back.
std::vector<std::vector<std::vector<float>>> tensor_parallel_logits(const runtime::model_config& model,
                                                                    const runtime::model_weights& weights,
                                                                    runtime::kv_cache_config cache, int ranks,
                                                                    const std::vector<runtime::step_batch>& steps,
                                                                    bool follow = false) {
  auto group = runtime::make_shared_memory_group(ranks);
  const auto shapes = runtime::shard_shapes(model, ranks);
  std::vector<std::unique_ptr<runtime::cpu_model_runner>> runners;
  for (int r = 0; r < ranks; ++r)
    runners.push_back(
        std::make_unique<runtime::cpu_model_runner>(model, runtime::shard_weights(weights, model, shapes[r]), cache, 1,
                                                    runtime::tensor_parallel_rank{shapes[r], group[r].get()}));
  std::vector<std::vector<std::vector<float>>> out(ranks, std::vector<std::vector<float>>(steps.size()));
  testing::on_rank_threads(ranks, [&](int r) {
    for (std::size_t s = 0; s < steps.size(); ++s) {
      if (follow && r > 0) {
        runners[r]->follow_step(steps[s]);
        continue;
      }
      out[r][s].resize(steps[s].logits_rows.size() * model.vocab_size);
      runners[r]->execute(steps[s], out[r][s]);
    }
  });
  return out;
}

// Compares every width's logits with the whole model's: within the tolerance, the same argmax
// on every row, and the same bits on every rank.
void check_widths_match(const runtime::model_config& model, const runtime::model_weights& weights,
                        runtime::kv_cache_config cache, std::vector<token_id> a, std::vector<token_id> b,
                        std::initializer_list<int> widths) {
  runtime::cpu_model_runner whole(model, weights, cache, 1);
  const auto script = greedy_steps(whole, std::move(a), std::move(b), 6, 7);
  const int vocab = model.vocab_size;
  for (int ranks : widths) {
    CAPTURE(ranks);
    const auto logits = tensor_parallel_logits(model, weights, cache, ranks, script.steps);
    float worst_ratio = 0;
    for (std::size_t s = 0; s < script.steps.size(); ++s) {
      CAPTURE(s);
      const auto& expected = script.logits[s];
      const auto& got = logits[0][s];
      REQUIRE(got.size() == expected.size());
      const float diff = max_abs_diff(got, expected), scale = max_abs(expected);
      CHECK(scale > 0.0f);
      CHECK(diff <= relative_tolerance * scale);
      worst_ratio = std::max(worst_ratio, diff / scale);
      for (std::size_t row = 0; row < expected.size() / vocab; ++row)
        CHECK(argmax(std::span(got).subspan(row * vocab, vocab)) ==
              argmax(std::span(expected).subspan(row * vocab, vocab)));
      for (int r = 1; r < ranks; ++r)
        CHECK(logits[r][s] == got);
    }
    MESSAGE(model.architecture << " at " << ranks << " ranks: max |d| / max |logit| = " << worst_ratio);
  }
}

std::vector<token_id> random_tokens(int n, int vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<token_id> pick(0, vocab - 1);
  std::vector<token_id> out(static_cast<std::size_t>(n));
  for (auto& t : out)
    t = pick(rng);
  return out;
}

std::vector<token_id> golden_prompt(std::size_t index) {
  const auto golden = read_json(stories_dir() / "golden_greedy.json");
  return json_array<token_id>(golden.at("cases").as_array().at(index).at("prompt_ids"));
}

} // namespace

TEST_CASE("stories260k shares out among 1, 2 and 4 ranks: heads, kv heads, MLP rows and vocabulary slices") {
  const auto& m = stories_model().config; // 8 heads, 4 kv heads, intermediate 172, vocab 512
  const auto one = runtime::shard_shapes(m, 1);
  REQUIRE(one.size() == 1);
  CHECK(one[0] == runtime::shard_shape{.rank = 0,
                                       .ranks = 1,
                                       .q_head_begin = 0,
                                       .q_heads = 8,
                                       .kv_head_begin = 0,
                                       .kv_heads = 4,
                                       .intermediate_begin = 0,
                                       .intermediate = 172,
                                       .vocab_begin = 0,
                                       .vocab = 512});
  const auto four = runtime::shard_shapes(m, 4);
  REQUIRE(four.size() == 4);
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    CHECK(four[r] == runtime::shard_shape{.rank = r,
                                          .ranks = 4,
                                          .q_head_begin = 2 * r,
                                          .q_heads = 2,
                                          .kv_head_begin = r,
                                          .kv_heads = 1,
                                          .intermediate_begin = 43 * r,
                                          .intermediate = 43,
                                          .vocab_begin = 128 * r,
                                          .vocab = 128});
  }
  const auto two = runtime::shard_shapes(m, 2);
  CHECK(two[1].q_head_begin == 4);
  CHECK(two[1].kv_head_begin == 2);
  CHECK(two[1].kv_heads == 2);
  CHECK(two[1].intermediate == 86);
  CHECK(two[1].vocab_begin == 256);
}

TEST_CASE(
    "fewer kv heads than ranks: each rank keeps the kv head its query heads read, and an uneven vocabulary splits by "
    "at most one row") {
  const auto m = gqa_config(); // 8 heads, 2 kv heads (groups of 4), vocab 250
  const auto four = runtime::shard_shapes(m, 4);
  const int kv_begin[] = {0, 0, 1, 1}, vocab_begin[] = {0, 62, 125, 187}, vocab[] = {62, 63, 62, 63};
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    CHECK(four[r].q_head_begin == 2 * r);
    CHECK(four[r].q_heads == 2);
    CHECK(four[r].kv_head_begin == kv_begin[r]);
    CHECK(four[r].kv_heads == 1);
    CHECK(four[r].intermediate == 24);
    CHECK(four[r].vocab_begin == vocab_begin[r]);
    CHECK(four[r].vocab == vocab[r]);
  }
  const auto eight = runtime::shard_shapes(m, 8); // one query head each, four ranks per kv head
  CHECK(eight[3].kv_head_begin == 0);
  CHECK(eight[4].kv_head_begin == 1);
  CHECK(eight[7].vocab_begin + eight[7].vocab == 250);
}

TEST_CASE("widths a model cannot serve are refused with a message naming the numbers") {
  const auto& stories = stories_model().config;
  auto m = refusal(stories, 3);
  CHECK(contains(m, "engine.tensor-parallel-size 3 does not divide"));
  CHECK(contains(m, "8 attention heads and 4 key/value heads"));

  m = refusal(stories, 8); // 8 heads and 4 kv heads share out, but 172 / 8 is not whole
  CHECK(contains(m, "engine.tensor-parallel-size 8"));
  CHECK(contains(m, "intermediate size 172"));

  m = refusal(heads_config(12, 3, 96, 250), 2); // 3 kv heads neither split in 2 nor share 2 ranks
  CHECK(contains(m, "engine.tensor-parallel-size 2 cannot share out"));
  CHECK(contains(m, "12 attention heads and 3 key/value heads"));
  m = refusal(heads_config(12, 8, 96, 250), 12); // 8 kv heads, 12 ranks: neither divides the other
  CHECK(contains(m, "12 attention heads and 8 key/value heads"));
  CHECK(refusal(heads_config(12, 3, 96, 250), 6).empty()); // two ranks per kv head

  m = refusal(heads_config(8, 2, 96, 3), 4);
  CHECK(contains(m, "engine.tensor-parallel-size 4"));
  CHECK(contains(m, "vocabulary of 3 tokens"));

  m = refusal(stories, 0);
  CHECK(contains(m, "engine.tensor-parallel-size 0"));
}

TEST_CASE("every shard piece is the slice of the whole tensor its shape names") {
  check_shard_pieces(stories_model().config, stories_model().weights, 2); // tied embeddings
  check_shard_pieces(stories_model().config, stories_model().weights, 4);
  check_shard_pieces(gqa_config(), gqa_weights(), 4); // biases, untied head, shared kv heads
  check_shard_pieces(gqa_config(), gqa_weights(), 8);
}

TEST_CASE("a rank's runner holds only its shard: its KV pool has its kv heads, and other shapes are refused") {
  const auto& model = stories_model();
  const auto shapes = runtime::shard_shapes(model.config, 4);
  auto group = runtime::make_shared_memory_group(4);
  const runtime::kv_cache_config cache{8, 16, 2};
  runtime::cpu_model_runner rank1(model.config, runtime::shard_weights(model.weights, model.config, shapes[1]), cache,
                                  1, runtime::tensor_parallel_rank{shapes[1], group[1].get()});
  const std::size_t hd = model.config.head_dim;
  CHECK(rank1.shard() == shapes[1]);
  CHECK(rank1.k_cache(0).size() == 8 * 1 * 16 * hd);
  CHECK(rank1.host_v_cache(0).size() == 2 * 1 * 16 * hd);
  runtime::cpu_model_runner whole(model.config, model.weights, cache, 1);
  CHECK(rank1.block_bytes() * 4 == whole.block_bytes());
  CHECK(whole.shard() == runtime::shard_shapes(model.config, 1)[0]);

  // The whole model's weights given to a rank, a rank's shard with another rank's collective,
  // a rank without a group.
  CHECK_THROWS_WITH_AS(runtime::cpu_model_runner(model.config, model.weights, cache, 1,
                                                 runtime::tensor_parallel_rank{shapes[1], group[1].get()}),
                       doctest::Contains("the output projection"), std::invalid_argument);
  CHECK_THROWS_AS(
      runtime::cpu_model_runner(model.config, runtime::shard_weights(model.weights, model.config, shapes[1]), cache, 1,
                                runtime::tensor_parallel_rank{shapes[1], group[2].get()}),
      std::invalid_argument);
  CHECK_THROWS_AS(
      runtime::cpu_model_runner(model.config, runtime::shard_weights(model.weights, model.config, shapes[1]), cache, 1,
                                runtime::tensor_parallel_rank{shapes[1], nullptr}),
      std::invalid_argument);
}

TEST_CASE("the shared-memory all-reduce sums in rank order, and every rank gets the same bits") {
  // In fp32, (1e8 + 1) - 1e8 + 1 is 1 in rank order; any other order gives 0 or 2.
  const float parts[] = {1e8f, 1.0f, -1e8f, 1.0f};
  auto group = runtime::make_shared_memory_group(4);
  CHECK(group[2]->rank() == 2);
  CHECK(group[2]->size() == 4);
  constexpr std::size_t n = 1000;
  std::vector<std::vector<float>> data(4);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<std::thread> threads;
    for (int r = 0; r < 4; ++r)
      threads.emplace_back([&, r] {
        data[r].assign(n, parts[r]);
        // Ranks arrive in a different order each trial.
        std::this_thread::sleep_for(std::chrono::microseconds(((trial + r) * 37) % 200));
        group[r]->all_reduce_sum(data[r]);
      });
    for (auto& t : threads)
      t.join();
    for (int r = 0; r < 4; ++r) {
      CAPTURE(trial);
      CAPTURE(r);
      CHECK(std::all_of(data[r].begin(), data[r].end(), [](float x) { return x == 1.0f; }));
    }
  }
}

TEST_CASE("the shared-memory all-gather puts each rank's columns in place, uneven widths included") {
  // A [2, 7] matrix over 3 ranks of widths 2, 2, 3: element (row, col) = 10 * row + col.
  const int rows = 2, columns = 7, begins[] = {0, 2, 4, 7};
  auto group = runtime::make_shared_memory_group(3);
  std::vector<std::vector<float>> whole(3, std::vector<float>(rows * columns, -1.0f));
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      std::vector<float> local;
      for (int row = 0; row < rows; ++row)
        for (int col = begins[r]; col < begins[r + 1]; ++col)
          local.push_back(static_cast<float>(10 * row + col));
      group[r]->all_gather_columns(local, rows, begins[r], whole[r]);
    });
  for (auto& t : threads)
    t.join();
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < rows * columns; ++i)
      CHECK(whole[r][i] == static_cast<float>(10 * (i / columns) + i % columns));
}

TEST_CASE("one rank in a group of one computes the bits of the runner over the whole model") {
  const auto& model = stories_model();
  const runtime::kv_cache_config cache{32, 16};
  runtime::cpu_model_runner whole(model.config, model.weights, cache, 1);
  const auto script = greedy_steps(whole, golden_prompt(2), golden_prompt(0), 4, 3);
  const auto logits = tensor_parallel_logits(model.config, model.weights, cache, 1, script.steps);
  for (std::size_t s = 0; s < script.steps.size(); ++s)
    CHECK(logits[0][s] == script.logits[s]);
}

TEST_CASE(
    "stories260k at 2 and 4 ranks: prefill and decode logits equal one runner's within 1e-5 of the largest, the same "
    "greedy tokens") {
  const auto& model = stories_model();
  check_widths_match(model.config, model.weights, runtime::kv_cache_config{32, 16}, golden_prompt(2), golden_prompt(0),
                     {2, 4});
}

TEST_CASE(
    "a random GQA model with q/k/v biases and an untied head at 2, 4 and 8 ranks: logits within 1e-5 of the largest, "
    "the same greedy tokens") {
  const auto m = gqa_config();
  check_widths_match(m, gqa_weights(), runtime::kv_cache_config{48, 4}, random_tokens(21, m.vocab_size, 1),
                     random_tokens(13, m.vocab_size, 2), {2, 4, 8});
}

TEST_CASE(
    "ranks that follow a step give rank 0 the logits of ranks that execute it; a runner that is no rank refuses") {
  const auto& model = stories_model();
  const runtime::kv_cache_config cache{32, 16};
  runtime::cpu_model_runner whole(model.config, model.weights, cache, 1);
  const auto script = greedy_steps(whole, golden_prompt(1), golden_prompt(3), 4, 5);
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    const auto executed = tensor_parallel_logits(model.config, model.weights, cache, ranks, script.steps);
    const auto followed = tensor_parallel_logits(model.config, model.weights, cache, ranks, script.steps, true);
    for (std::size_t s = 0; s < script.steps.size(); ++s)
      CHECK(followed[0][s] == executed[0][s]);
  }
  CHECK_THROWS_WITH_AS(whole.follow_step(script.steps.front()), doctest::Contains("not a tensor-parallel rank"),
                       std::logic_error);
}
