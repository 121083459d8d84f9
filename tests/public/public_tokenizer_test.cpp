// troupe::tokenizer, the public face of runtime's tokenizer (what troupe-tokenize and
// hosts use): it gives exactly runtime's ids and text, and reports a bad path as model_error.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "runtime/tokenizer.hpp"
#include "tests/support/data_root.hpp"
#include "troupe/errors.hpp"
#include "troupe/tokenizer.hpp"

namespace {
std::filesystem::path stories_dir() { return troupe::testing::stories_dir(); }
} // namespace

TEST_CASE("the public tokenizer encodes and decodes exactly as runtime's") {
  const auto pub = troupe::tokenizer::load(stories_dir().string());
  const auto internal = troupe::runtime::tokenizer::load(stories_dir());
  CHECK(pub.vocab_size() == internal.vocab_size());
  for (const std::string text : {"Once upon a time, there was a little cat.", "", "Lily's ball: 42!\n\tDone"}) {
    INFO(text);
    for (bool special : {true, false}) {
      const auto ids = pub.encode(text, special);
      CHECK(ids == internal.encode(text, special));
      for (bool skip : {true, false})
        CHECK(pub.decode(ids, skip) == internal.decode(ids, skip));
    }
  }
  const auto ids = pub.encode("Once upon a time", false);
  REQUIRE_FALSE(ids.empty());
  CHECK(pub.decode(ids) == "Once upon a time");
}

TEST_CASE("a copy shares the loaded tokenizer and answers the same") {
  const auto a = troupe::tokenizer::load(stories_dir().string());
  const troupe::tokenizer b = a;
  CHECK(b.encode("The dog ran.") == a.encode("The dog ran."));
}

TEST_CASE("a path without a tokenizer is a model_error") {
  CHECK_THROWS_AS(troupe::tokenizer::load((stories_dir() / "no-such-folder").string()), troupe::model_error);
}
