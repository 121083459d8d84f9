// Stop strings are found across token boundaries and never emitted, not even
// in part; text that only looked like a stop string's start is released.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "runtime/stop_matcher.hpp"

using troupe::runtime::stop_matcher;

namespace {
// Feeds pieces; returns the emitted text and whether a stop string ended it.
std::pair<std::string, bool> feed(std::vector<std::string> stops, std::vector<std::string> pieces) {
  stop_matcher m(std::move(stops));
  std::string out;
  for (const auto& p : pieces) {
    auto r = m.push(p);
    out += r.text;
    if (r.stopped)
      return {out, true};
  }
  return {out + m.flush(), false};
}
} // namespace

TEST_CASE("a stop string split over three pieces stops the stream before it") {
  auto [text, stopped] = feed({"The end"}, {"and they lived. Th", "e e", "nd of it"});
  CHECK(stopped);
  CHECK(text == "and they lived. ");
}

TEST_CASE("text that only began like a stop string is released") {
  auto [text, stopped] = feed({"STOP"}, {"ST", "OR", "Y"});
  CHECK_FALSE(stopped);
  CHECK(text == "STORY");
}

TEST_CASE("held-back text is released at the end of the stream") {
  stop_matcher m({"###"});
  auto r = m.push("abc#");
  CHECK(r.text == "abc");
  CHECK(m.flush() == "#");
}

TEST_CASE("the earliest of several stop strings wins") {
  auto [text, stopped] = feed({"world", "lo"}, {"hello world"});
  CHECK(stopped);
  CHECK(text == "hel");
}

TEST_CASE("before min_tokens a stop string is text, and once armed the next one stops the stream") {
  stop_matcher m({"END"});
  auto r = m.push("the END", /*may_stop=*/false);
  CHECK_FALSE(r.stopped);
  CHECK(r.text == "the END");
  r = m.push(" and E", false);
  CHECK_FALSE(r.stopped);
  CHECK(r.text == " and "); // "E" may still begin one
  r = m.push("ND", true);
  CHECK(r.stopped);
  CHECK(r.text.empty());
}

TEST_CASE("without stop strings everything passes straight through") {
  stop_matcher m({});
  CHECK(m.push("abc").text == "abc");
  CHECK(m.flush().empty());
}
