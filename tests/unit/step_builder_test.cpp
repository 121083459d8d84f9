// A step's rows as the executor gets them: prompt rows then the sampled row per
// sequence, no sampled row for a prefill chunk that stops short, a speculating
// sequence's k + 1 rows in one spec_row, histories to reload, and the batch's layout.
#include <doctest/doctest.h>

#include "runtime/step_builder.hpp"

using namespace troupe::runtime;

namespace {
sequence make_seq(seq_id id, std::vector<token_id> tokens, int prompt_len) {
  sequence s;
  s.id = id;
  s.tokens = std::move(tokens);
  s.prompt_len = prompt_len;
  s.seed = 100 + id;
  s.status = seq_status::running;
  return s;
}
} // namespace

TEST_CASE("a decode and a prefill chunk: one sampled row for the decode, none for a chunk that stops short") {
  auto decode = make_seq(1, {5, 6, 7, 8}, 3); // 1 output token, 3 computed
  auto prompt = make_seq(2, {9, 10, 11, 12, 13}, 5);
  granted_work wd{1, 3, 4, {0}};
  granted_work wp{2, 0, 3, {1}};
  step_builder b(4, max_blocks_of(std::vector<granted_work>{wd, wp}));
  b.add(wd, decode, 1);
  b.add(wp, prompt, 1);
  auto step = b.take(7);
  CHECK(wd.samples);
  CHECK_FALSE(wp.samples);
  CHECK(wd.prompt_rows == 0);
  CHECK(wp.prompt_rows == 0);
  CHECK(step.batch.step_id == 7);
  CHECK(step.batch.token_ids == std::vector<token_id>{8, 9, 10, 11});
  CHECK(step.batch.logits_rows == std::vector<std::int32_t>{0});
  CHECK(step.seq_ids == std::vector<seq_id>{1, 2});
  REQUIRE(step.rows.size() == 1);
  CHECK(step.rows[0].id == 1);
  CHECK(step.rows[0].step == 1); // the second output token is drawn
  CHECK(step.rows[0].seed == 101);
  CHECK(step.rows[0].prompt_len == 3);
  CHECK(step.rows[0].logits_index == 0);
  CHECK(step.rows[0].score_target == -1);
  CHECK(step.verify.empty());
}

TEST_CASE("prompt logprobs: each prompt row scores the next prompt token, across chunks, then the sampled row") {
  auto s = make_seq(3, {20, 21, 22, 23, 24}, 5);
  s.params.prompt_logprobs = 2;
  // First chunk [0, 3): positions 0..2 score tokens 1..3.
  granted_work w1{3, 0, 3, {0, 1}};
  step_builder b1(4, 2);
  b1.add(w1, s, 1);
  auto first = b1.take(0);
  CHECK(w1.prompt_rows == 3);
  CHECK_FALSE(w1.samples);
  REQUIRE(first.rows.size() == 3);
  CHECK(first.rows[0].score_target == 21);
  CHECK(first.rows[2].score_target == 23);
  CHECK(first.rows[2].logits_index == 2);
  CHECK(first.batch.logits_rows.size() == 3);
  // Second chunk [3, 5): position 3 scores token 4; position 4 samples.
  granted_work w2{3, 3, 5, {0, 1}};
  step_builder b2(4, 2);
  b2.add(w2, s, 4);
  auto second = b2.take(1);
  CHECK(w2.prompt_rows == 1);
  CHECK(w2.samples);
  REQUIRE(second.rows.size() == 2);
  CHECK(second.rows[0].score_target == 24);
  CHECK(second.rows[1].score_target == -1);
  CHECK(second.rows[1].step == 0);
  CHECK(second.rows[1].logits_index == 1);
}

TEST_CASE("a speculating sequence verifies its drafts over k + 1 rows and gets no sample_row") {
  auto plain = make_seq(1, {1, 2, 3}, 2);
  auto spec = make_seq(2, {4, 5, 6, 7}, 2);
  granted_work wa{1, 2, 3, {0}};
  granted_work ws{2, 3, 4, {1, 2}};
  step_builder b(4, 2);
  b.add(wa, plain, 1);
  b.add_speculation(ws, spec, std::vector<token_id>{40, 41}, {0.5f});
  auto step = b.take(3);
  CHECK(ws.drafted == 2);
  CHECK_FALSE(ws.samples);
  REQUIRE(step.verify.size() == 1);
  CHECK(step.verify[0].first_logits_index == 1);
  CHECK(step.verify[0].draft == std::vector<token_id>{40, 41});
  CHECK(step.verify[0].draft_probs == std::vector<float>{0.5f});
  CHECK(step.verify[0].step == 2);
  CHECK(step.rows.size() == 1);
  CHECK(step.batch.token_ids == std::vector<token_id>{3, 7, 40, 41});
  CHECK(step.batch.logits_rows == std::vector<std::int32_t>{0, 1, 2, 3});
  CHECK(step.batch.positions == std::vector<std::int32_t>{2, 3, 4, 5});
}

TEST_CASE("a sequence starting with cached tokens has its sampler history and logit rules reloaded") {
  auto s = make_seq(5, {1, 2, 3, 4, 5, 6}, 6);
  granted_work w{5, 4, 6, {0, 1}};
  step_builder b(4, 2);
  logit_rules rules;
  rules.bias = {{3, 2.0f}};
  b.reset_history(w, s, rules);
  b.add(w, s, 1);
  auto step = b.take(0);
  REQUIRE(step.reset_ids == std::vector<seq_id>{5});
  CHECK(step.reset_tokens[0] == std::vector<token_id>{1, 2, 3, 4});
  REQUIRE(step.reset_rules.size() == 1);
  CHECK(step.reset_rules[0] == rules);
  // take() starts afresh: a second step carries nothing of the first.
  auto empty = b.take(1);
  CHECK(empty.rows.empty());
  CHECK(empty.reset_ids.empty());
  CHECK(empty.reset_rules.empty());
  CHECK(empty.batch.token_ids.empty());
}
