// The CPU forward pass is the reference: it reproduces the golden logits and
// greedy tokens of stories260k, and its logits do not depend on the block size,
// on where the blocks lie, on what else is in the batch, on chunked prefill, or
// on the number of threads.
#include <doctest/doctest.h>

#include "runtime/step_batch_builder.hpp"
#include "tests/support/stories_model.hpp"

using namespace troupe;
using namespace troupe::testing;
using runtime::token_id;

namespace {
// Runs one sequence's tokens through a runner in chunks (0 = all at once), with
// logits for every position; returns [tokens, vocab].
std::vector<float> all_logits(runtime::model_runner& runner, const std::vector<token_id>& tokens,
                              std::span<const std::int32_t> table, int chunk = 0) {
  const int vocab = runner.config().vocab_size;
  const int bs = runner.cache_config().block_size;
  std::vector<float> out;
  int done = 0, n = static_cast<int>(tokens.size());
  while (done < n) {
    int len = chunk > 0 ? std::min(chunk, n - done) : n - done;
    runtime::step_batch_builder b(bs, static_cast<int>(table.size()));
    b.add(std::span(tokens).subspan(done, len), done, table, false);
    auto batch = b.take(0);
    for (int r = 0; r < len; ++r)
      batch.logits_rows.push_back(r);
    std::vector<float> logits(static_cast<std::size_t>(len) * vocab);
    runner.execute(batch, logits);
    out.insert(out.end(), logits.begin(), logits.end());
    done += len;
  }
  return out;
}

std::vector<token_id> golden_sequence(std::size_t index) {
  auto golden = read_json(stories_dir() / "golden_greedy.json");
  const auto& c = golden.at("cases").as_array().at(index);
  auto ids = json_array<token_id>(c.at("prompt_ids"));
  auto gen = json_array<token_id>(c.at("generated_ids"));
  ids.insert(ids.end(), gen.begin(), gen.end());
  return ids;
}
} // namespace

TEST_CASE("last-position logits match golden_logits.json within 1e-4") {
  auto golden = read_json(stories_dir() / "golden_logits.json");
  auto runner = make_runner(16, 64);
  int cases = 0;
  for (const auto& c : golden.at("cases").as_array()) {
    auto ids = json_array<token_id>(c.at("prompt_ids"));
    auto expected = json_array<float>(c.at("logits"));
    auto pool = shuffled_pool(64, 1);
    auto table = scattered_blocks(static_cast<int>(ids.size()), 16, pool);
    auto logits = all_logits(*runner, ids, table);
    std::span<const float> last(logits.data() + (ids.size() - 1) * 512, 512);
    CAPTURE(c.at("prompt").as_string());
    CHECK(max_abs_diff(last, expected) < 1e-4f);
    ++cases;
  }
  CHECK(cases == 5);
}

TEST_CASE("logits are the same for block sizes 1, 16 and 128, with scattered blocks") {
  auto tokens = golden_sequence(0);  // 69 tokens: spans several blocks of 16 and 1
  std::vector<std::vector<float>> results;
  for (int bs : {1, 16, 128}) {
    int blocks = (512 + bs - 1) / bs;
    auto runner = make_runner(bs, blocks);
    auto pool = shuffled_pool(blocks, static_cast<unsigned>(bs));
    auto table = scattered_blocks(static_cast<int>(tokens.size()), bs, pool);
    results.push_back(all_logits(*runner, tokens, table));
  }
  CHECK(max_abs_diff(results[0], results[1]) < 1e-5f);
  CHECK(max_abs_diff(results[0], results[2]) < 1e-5f);
}

TEST_CASE("a sequence's logits are the same inside a mixed batch as alone") {
  const int bs = 16, blocks = 128;
  auto a = golden_sequence(1), b = golden_sequence(2), c = golden_sequence(3);
  b.resize(23);
  c.resize(40);

  // Alone.
  auto solo_runner = make_runner(bs, blocks);
  auto pool = shuffled_pool(blocks, 3);
  auto table_a = scattered_blocks(static_cast<int>(a.size()), bs, pool);
  auto solo = all_logits(*solo_runner, a, table_a);

  // In a batch: c already has 30 tokens cached and decodes-by-chunk its rest, b is
  // prefilled whole, a is prefilled whole; then all three decode one more token.
  auto runner = make_runner(bs, blocks);
  auto pool2 = shuffled_pool(blocks, 4);
  auto tb = scattered_blocks(static_cast<int>(b.size()), bs, pool2);
  auto tc = scattered_blocks(static_cast<int>(c.size()), bs, pool2);
  auto ta = scattered_blocks(static_cast<int>(a.size()), bs, pool2);
  std::vector<token_id> c_head(c.begin(), c.begin() + 30);
  all_logits(*runner, c_head, tc);

  int a_prefill = static_cast<int>(a.size()) - 1;
  runtime::step_batch_builder builder(bs, 8);
  builder.add(std::span(c).subspan(30, 10), 30, tc, true);
  builder.add(std::span(a).first(a_prefill), 0, ta, false);
  builder.add(b, 0, tb, true);
  auto batch = builder.take(1);
  int a_first = batch.query_start[1];
  batch.logits_rows.clear();
  for (int r = 0; r < a_prefill; ++r)
    batch.logits_rows.push_back(a_first + r);
  std::vector<float> mixed(batch.logits_rows.size() * 512);
  runner->execute(batch, mixed);
  CHECK(max_abs_diff(std::span(mixed), std::span(solo).first(mixed.size())) < 1e-5f);

  // Decode step: a's last token beside one decode token of b and c each.
  runtime::step_batch_builder decode(bs, 8);
  token_id next_b = 5, next_c = 7;
  decode.add(std::span(&next_b, 1), static_cast<int>(b.size()), tb, true);
  decode.add(std::span(a).subspan(a_prefill, 1), a_prefill, ta, true);
  decode.add(std::span(&next_c, 1), static_cast<int>(c.size()), tc, true);
  auto step = decode.take(2);
  std::vector<float> out(3 * 512);
  runner->execute(step, out);
  CHECK(max_abs_diff(std::span(out).subspan(512, 512), std::span(solo).subspan(a_prefill * 512, 512)) < 1e-5f);
}

TEST_CASE("chunked prefill in 3 chunks gives the logits of one-shot prefill") {
  auto tokens = golden_sequence(4);
  const int bs = 16, blocks = 64;
  auto one = make_runner(bs, blocks);
  auto three = make_runner(bs, blocks);
  auto pool = shuffled_pool(blocks, 5);
  auto table = scattered_blocks(static_cast<int>(tokens.size()), bs, pool);
  auto whole = all_logits(*one, tokens, table);
  int chunk = (static_cast<int>(tokens.size()) + 2) / 3;
  auto chunked = all_logits(*three, tokens, table, chunk);
  REQUIRE(whole.size() == chunked.size());
  CHECK(max_abs_diff(whole, chunked) < 1e-5f);
}

TEST_CASE("one thread and two threads compute the same logits") {
  auto tokens = golden_sequence(2);
  auto r1 = make_runner(16, 64, 1);
  auto r2 = make_runner(16, 64, 2);
  auto pool = shuffled_pool(64, 6);
  auto table = scattered_blocks(static_cast<int>(tokens.size()), 16, pool);
  CHECK(max_abs_diff(all_logits(*r1, tokens, table), all_logits(*r2, tokens, table)) == 0.0f);
}

TEST_CASE("a step_batch that points outside the cache is refused before any memory is touched") {
  auto runner = make_runner(16, 4);
  std::vector<std::int32_t> table{0, 1, 2, 9};  // block 9 does not exist
  runtime::step_batch_builder b(16, 4);
  std::vector<token_id> tokens(60, 5);
  b.add(tokens, 0, table, true);
  auto batch = b.take(0);
  std::vector<float> logits(512);
  CHECK_THROWS_AS(runner->execute(batch, logits), std::logic_error);

  runtime::step_batch_builder b2(16, 4);
  std::vector<token_id> bad_token{600};  // vocab is 512
  std::vector<std::int32_t> table2{0};
  b2.add(bad_token, 0, table2, true);
  auto batch2 = b2.take(1);
  CHECK_THROWS_AS(runner->execute(batch2, logits), std::logic_error);
}

TEST_CASE("swapping blocks out to the host tier and back is bit-identical and decoding continues unchanged") {
  const int bs = 16;
  auto tokens = golden_sequence(3);  // 69 tokens: 5 blocks
  const int n = static_cast<int>(tokens.size()) - 1;
  const auto& m = stories_model();
  runtime::cpu_model_runner runner(m.config, m.weights, runtime::kv_cache_config{16, bs, 8}, 1);
  std::vector<std::int32_t> table{3, 9, 4, 12, 7};
  // Prefill all but the last token, keeping the cache contents.
  runtime::step_batch_builder b(bs, 5);
  b.add(std::span(tokens).first(n), 0, table, true);
  auto prefill = b.take(0);
  std::vector<float> logits(512);
  runner.execute(prefill, logits);
  std::vector<std::vector<float>> k_before, v_before;
  auto block_elems = static_cast<std::size_t>(m.config.num_key_value_heads) * bs * m.config.head_dim;
  auto gather = [&](std::span<float> pool, std::span<const std::int32_t> blocks) {
    std::vector<float> out;
    for (auto blk : blocks)
      out.insert(out.end(), pool.begin() + blk * block_elems, pool.begin() + (blk + 1) * block_elems);
    return out;
  };
  for (int l = 0; l < m.config.num_hidden_layers; ++l) {
    k_before.push_back(gather(runner.k_cache(l), table));
    v_before.push_back(gather(runner.v_cache(l), table));
  }
  // Out to host blocks 2..6, clobber the device pool, back into other device blocks.
  std::vector<runtime::block_copy> out_pairs, in_pairs;
  std::vector<std::int32_t> host{2, 3, 4, 5, 6}, new_table{0, 1, 2, 5, 6};
  for (int i = 0; i < 5; ++i) {
    out_pairs.push_back({table[i], host[i]});
    in_pairs.push_back({host[i], new_table[i]});
  }
  runner.copy_blocks(runtime::kv_copy::device_to_host, out_pairs);
  for (int l = 0; l < m.config.num_hidden_layers; ++l) {
    std::fill(runner.k_cache(l).begin(), runner.k_cache(l).end(), 1e30f);
    std::fill(runner.v_cache(l).begin(), runner.v_cache(l).end(), 1e30f);
  }
  runner.copy_blocks(runtime::kv_copy::host_to_device, in_pairs);
  for (int l = 0; l < m.config.num_hidden_layers; ++l) {
    CHECK(gather(runner.k_cache(l), new_table) == k_before[l]);
    CHECK(gather(runner.v_cache(l), new_table) == v_before[l]);
  }
  // The next token's logits from the moved cache equal those of an undisturbed run.
  runtime::step_batch_builder d(bs, 5);
  d.add(std::span(tokens).subspan(n, 1), n, new_table, true);
  auto decode = d.take(1);
  std::vector<float> moved(512);
  runner.execute(decode, moved);
  auto reference = make_runner(bs, 16);
  auto expected = all_logits(*reference, tokens, table);
  CHECK(max_abs_diff(moved, std::span(expected).subspan(static_cast<std::size_t>(n) * 512, 512)) == 0.0f);
  // Pairs outside the pools are refused.
  std::vector<runtime::block_copy> bad{{0, 8}};
  CHECK_THROWS_AS(runner.copy_blocks(runtime::kv_copy::device_to_host, bad), std::logic_error);
}
