// A finished step's effect: the sampled token joins its sequence and ends it on
// a stop id or the length limit (one rule: finish_after); a verification keeps
// the accepted drafts and the corrected token, cut at a finish, and trims the
// rejected slots; full blocks go to the prefix index only when a step filled one.
#include <doctest/doctest.h>

#include "runtime/step_outcome.hpp"

using namespace troupe::runtime;

namespace {
// A running sequence with prompt_len tokens of prompt and `output` tokens of output, all but the last computed.
scheduler_policy with_sequence(seq_id id, int prompt_len, int output, int max_tokens) {
  scheduler_policy p({});
  sequence s;
  s.id = id;
  for (int i = 0; i < prompt_len + output; ++i)
    s.tokens.push_back(100 + i);
  s.prompt_len = prompt_len;
  s.params.max_tokens = max_tokens;
  p.add(std::move(s));
  p.admitted(id, 0);
  p.computed(id, prompt_len + output - 1);
  return p;
}
const std::vector<token_id> stop_ids{2};
} // namespace

TEST_CASE("finish_after: a stop id wins over the length limit, max_tokens and the context both end a sequence") {
  const finish_limits limits{4, 10};
  CHECK(finish_after(2, stop_ids, 4, 8, limits) == finish_reason::stop);
  CHECK(finish_after(7, stop_ids, 4, 8, limits) == finish_reason::length);
  CHECK(finish_after(7, stop_ids, 3, 10, limits) == finish_reason::length);
  CHECK(finish_after(7, stop_ids, 3, 9, limits) == finish_reason::none);
  CHECK(to_string(finish_reason::none).empty());
  CHECK(to_string(finish_reason::stop) == "stop");
  CHECK(to_string(finish_reason::length) == "length");
}

TEST_CASE("finish_after: before min_tokens other tokens a stop id does not end the output") {
  const finish_limits limits{10, 100, 3};
  CHECK(finish_after(2, stop_ids, 1, 9, limits) == finish_reason::none);
  CHECK(finish_after(2, stop_ids, 3, 11, limits) == finish_reason::none); // the 3rd token: not yet 3 others
  CHECK(finish_after(2, stop_ids, 4, 12, limits) == finish_reason::stop);
  CHECK(finish_after(7, stop_ids, 10, 18, limits) == finish_reason::length);
}

TEST_CASE("stop_ids_for: the request's own ids, plus the model's unless ignore_eos") {
  sampling_params p;
  p.stop_token_ids = {7};
  const std::vector<token_id> model{2, 3};
  CHECK(stop_ids_for(p, model) == std::vector<token_id>{7, 2, 3});
  p.ignore_eos = true;
  CHECK(stop_ids_for(p, model) == std::vector<token_id>{7});
}

TEST_CASE("a sampled token joins its sequence, and the token that reaches max_tokens ends it with length") {
  auto policy = with_sequence(1, 3, 1, 3);
  step_outcome outcome(policy, {4, false, 100});
  granted_work w{1, 3, 4, {0}, 0, true, 0};
  CHECK(outcome.is_decode(w));
  outcome.computed(w);
  CHECK(policy.at(1).num_computed == 4);
  auto a = outcome.sampled(w, 50, stop_ids);
  CHECK(a.tokens == std::vector<token_id>{50});
  CHECK(a.finish == finish_reason::none);
  granted_work w2{1, 4, 5, {0, 1}, 0, true, 0};
  outcome.computed(w2);
  auto b = outcome.sampled(w2, 51, stop_ids);
  CHECK(b.finish == finish_reason::length);
  CHECK(policy.at(1).tokens.size() == 6);
}

TEST_CASE("a sampled stop id ends the sequence with stop") {
  auto policy = with_sequence(1, 3, 1, 100);
  step_outcome outcome(policy, {4, false, 100});
  granted_work w{1, 3, 4, {0}, 0, true, 0};
  outcome.computed(w);
  CHECK(outcome.sampled(w, 2, stop_ids).finish == finish_reason::stop);
}

TEST_CASE("the context's end ends a sequence with length") {
  auto policy = with_sequence(1, 3, 1, 100);
  step_outcome outcome(policy, {4, false, 5});
  granted_work w{1, 3, 4, {0}, 0, true, 0};
  outcome.computed(w);
  CHECK(outcome.sampled(w, 60, stop_ids).finish == finish_reason::length);
}

TEST_CASE("a prefill chunk is not a decode, and a chunk that fills a block is indexed, one that does not is not") {
  scheduler_policy policy({});
  sequence s;
  s.id = 9;
  s.tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  s.prompt_len = 10;
  policy.add(std::move(s));
  policy.admitted(9, 0);
  step_outcome outcome(policy, {4, true, 100});
  granted_work chunk{9, 0, 3, {0}, 0, false, 0};
  CHECK_FALSE(outcome.is_decode(chunk));
  outcome.computed(chunk);
  CHECK(outcome.take_followup().computed_ids.empty()); // [0, 3) fills no block
  granted_work next{9, 3, 9, {0, 1, 2}, 0, false, 0};
  outcome.computed(next);
  auto f = outcome.take_followup();
  REQUIRE(f.computed_ids == std::vector<seq_id>{9});
  CHECK(f.computed_counts == std::vector<int>{9});
  CHECK(f.computed_tokens[0] == std::vector<token_id>{1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(outcome.take_followup().computed_ids.empty()); // taken once
}

TEST_CASE("a verification keeps accepted drafts and the corrected token, and trims the rejected drafts' slots") {
  auto policy = with_sequence(1, 3, 1, 100); // 4 tokens, 3 computed
  step_outcome outcome(policy, {4, true, 100});
  granted_work w{1, 3, 4, {0, 1}, 0, false, 3}; // 3 drafts verified
  CHECK(outcome.is_decode(w));
  const std::vector<token_id> emitted{70, 71}; // one draft accepted, then the corrected token
  outcome.verified_computed(w, emitted);
  CHECK(policy.at(1).num_computed == 5); // the last token and the accepted draft
  auto a = outcome.verified(w, emitted, stop_ids);
  CHECK(a.tokens == emitted);
  CHECK(a.finish == finish_reason::none);
  CHECK(policy.at(1).tokens.size() == 6);
  auto f = outcome.take_followup();
  CHECK(f.trim_ids == std::vector<seq_id>{1});
  CHECK(f.trim_tokens == std::vector<int>{6});
  CHECK(f.computed_counts == std::vector<int>{5}); // the step filled block 0 ([0, 4))
}

TEST_CASE("a verification's tokens are cut at a stop id or at max_tokens") {
  SUBCASE("stop id in the middle") {
    auto policy = with_sequence(1, 3, 1, 100);
    step_outcome outcome(policy, {4, false, 100});
    granted_work w{1, 3, 4, {0, 1}, 0, false, 3};
    const std::vector<token_id> emitted{70, 2, 72, 73};
    outcome.verified_computed(w, emitted);
    auto a = outcome.verified(w, emitted, stop_ids);
    CHECK(a.tokens == std::vector<token_id>{70, 2});
    CHECK(a.finish == finish_reason::stop);
  }
  SUBCASE("max_tokens reached by the second token") {
    auto policy = with_sequence(1, 3, 1, 3);
    step_outcome outcome(policy, {4, false, 100});
    granted_work w{1, 3, 4, {0, 1}, 0, false, 3};
    const std::vector<token_id> emitted{70, 71, 72, 73};
    outcome.verified_computed(w, emitted);
    auto a = outcome.verified(w, emitted, stop_ids);
    CHECK(a.tokens == std::vector<token_id>{70, 71});
    CHECK(a.finish == finish_reason::length);
    CHECK(policy.at(1).num_output() == 3);
  }
}
