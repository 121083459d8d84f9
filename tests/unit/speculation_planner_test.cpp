// Who drafts how many tokens: only decoding sequences that ask for no
// logprobs, never past max_tokens or the context, the request's override
// (0 = never, clamped to max_k), and adaptive k backing off after rejections.
#include <doctest/doctest.h>

#include "runtime/speculation_planner.hpp"

using namespace troupe::runtime;

namespace {
sequence decoding(seq_id id, int prompt_len, int output, int max_tokens) {
  sequence s;
  s.id = id;
  s.tokens.assign(static_cast<std::size_t>(prompt_len + output), 5);
  s.prompt_len = prompt_len;
  s.num_computed = prompt_len + output - 1;
  s.status = seq_status::running;
  s.params.max_tokens = max_tokens;
  return s;
}
} // namespace

TEST_CASE("fixed k: the engine's k for a decoding sequence, 0 for prefill, logprobs or an unknown sequence") {
  speculation_planner planner({4, false});
  auto s = decoding(1, 8, 2, 100);
  planner.add(1, -1);
  CHECK(planner.k_for(s, 1, 1000) == 4);
  CHECK(planner.k_for(s, 2, 1000) == 0);          // a chunk, not one decode token
  auto first = decoding(1, 8, 0, 100);             // no output yet: the prompt's last token
  CHECK(planner.k_for(first, 1, 1000) == 0);
  auto lp = s;
  lp.params.logprobs = 1;
  CHECK(planner.k_for(lp, 1, 1000) == 0);
  auto unknown = decoding(2, 8, 2, 100);
  CHECK(planner.k_for(unknown, 1, 1000) == 0);
  planner.remove(1);
  CHECK(planner.k_for(s, 1, 1000) == 0);
}

TEST_CASE("k never runs past max_tokens or the context") {
  speculation_planner planner({4, false});
  planner.add(1, -1);
  CHECK(planner.k_for(decoding(1, 8, 2, 4), 1, 1000) == 1);   // 2 more tokens allowed: 1 draft + the bonus
  CHECK(planner.k_for(decoding(1, 8, 2, 3), 1, 1000) == 0);
  CHECK(planner.k_for(decoding(1, 8, 2, 100), 1, 12) == 2);   // 10 tokens, context 12
}

TEST_CASE("a request's num_speculative_tokens overrides the engine's: 0 never speculates, large ones are clamped") {
  speculation_planner planner({4, false});
  planner.add(1, 0);
  planner.add(2, 2);
  planner.add(3, 1000);
  CHECK(planner.k_for(decoding(1, 8, 2, 100), 1, 1000) == 0);
  CHECK(planner.k_for(decoding(2, 8, 2, 100), 1, 1000) == 2);
  CHECK(planner.k_for(decoding(3, 8, 2, 100), 1, 1000) == speculation_planner::max_k);
}

TEST_CASE("adaptive k backs off when every draft is rejected") {
  speculation_planner planner({4, true});
  planner.add(1, -1);
  auto s = decoding(1, 8, 2, 1000);
  const int first = planner.k_for(s, 1, 100000);
  CHECK(first > 0);
  for (int i = 0; i < 30; ++i) {
    int k = planner.k_for(s, 1, 100000);
    if (k > 0)
      planner.observe(1, k, 0);
  }
  CHECK(planner.k_for(s, 1, 100000) < first);
}
