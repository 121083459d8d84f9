// The measured cost of speculation: until both kinds of decode step were seen
// the fallback holds; then a speculating step twice as long as a plain one,
// drafting 2 tokens per sequence, costs half a target step per draft token.
#include <doctest/doctest.h>

#include "runtime/speculation_cost.hpp"

using troupe::runtime::speculation_cost;

TEST_CASE("the fallback holds until plain and speculating steps were both seen") {
  speculation_cost c;
  CHECK(c.per_draft_token(0.1) == 0.1);
  c.observe_plain(100);
  CHECK(c.per_draft_token(0.1) == 0.1);
  c.observe_speculative(200, 2);
  CHECK(c.per_draft_token(0.1) == doctest::Approx(0.5));
}

TEST_CASE("the cost follows the steps and never goes negative") {
  speculation_cost c;
  c.observe_plain(100);
  c.observe_speculative(90, 3);  // a speculating step as cheap as a plain one: no cost, not a gain
  CHECK(c.per_draft_token(0.1) == 0.0);
  for (int i = 0; i < 200; ++i) {
    c.observe_plain(100);
    c.observe_speculative(130, 3);
  }
  CHECK(c.per_draft_token(0.1) == doctest::Approx(0.1).epsilon(1e-3));
  c.observe_plain(-5);        // ignored
  c.observe_speculative(50, 0);  // ignored
  CHECK(c.per_draft_token(0.1) == doctest::Approx(0.1).epsilon(1e-3));
}
