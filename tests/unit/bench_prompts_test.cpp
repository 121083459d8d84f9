// troupe-bench's prompt generator with runtime's tokenizer playing the server's /tokenize and
// /detokenize, for both bundled tokenizers: every prompt tokenizes back to exactly its length
// with every id inside the model's vocabulary (GPT-2's tokenizer under a 32,000-id limit, as the
// dummy 13B and 8B shapes borrow it) and no NUL, a shared prefix survives, and a seed gives the
// same prompts.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "apps/troupe-bench/load/prompt_generator.hpp"
#include "runtime/tokenizer.hpp"
#include "tests/support/data_root.hpp"

using namespace troupe::bench;

namespace {

// What troupe-serve does for /tokenize with add_special_tokens false and for /detokenize.
class local_codec final : public token_codec {
 public:
  explicit local_codec(const troupe::runtime::tokenizer& tok) : tok_(tok) {}
  std::vector<token_id> encode(const std::string& text) override { return tok_.encode(text, false); }
  std::string decode(const std::vector<token_id>& ids) override { return tok_.decode(ids, true); }

 private:
  const troupe::runtime::tokenizer& tok_;
};

const troupe::runtime::tokenizer& stories() {
  static const auto t = troupe::runtime::tokenizer::load(troupe::testing::stories_dir());
  return t;
}

const troupe::runtime::tokenizer& gpt2() {
  static const auto t = troupe::runtime::tokenizer::load(troupe::testing::data_root() / "tests/data/gpt2");
  return t;
}

struct served_model {
  const char* name;
  const troupe::runtime::tokenizer& tok;
  token_id vocab; // the model's, which the server checks prompt ids against
};

std::vector<served_model> both_tokenizers() {
  return {{"stories260k", stories(), 512}, {"gpt2 lent to a 32,000-id model", gpt2(), 32000}};
}

bool inside(const std::vector<token_id>& ids, token_id vocab) {
  return std::all_of(ids.begin(), ids.end(), [vocab](token_id id) { return id >= 0 && id < vocab; });
}

} // namespace

TEST_CASE("every prompt tokenizes back to exactly its length with every id inside the vocabulary") {
  for (const auto& model : both_tokenizers()) {
    CAPTURE(model.name);
    local_codec codec(model.tok);
    prompt_generator prompts(codec, model.vocab);
    std::mt19937_64 rng(7);
    for (int len : {1, 2, 7, 64, 300}) {
      CAPTURE(len);
      for (int i = 0; i < 20; ++i) {
        auto p = prompts.make(len, rng);
        CAPTURE(p.text);
        CHECK(static_cast<int>(p.ids.size()) == len);
        CHECK(p.text.find('\0') == std::string::npos); // troupe-serve's /tokenize stops at a NUL
        // What the server will see: the same ids again, all of which the model has.
        auto again = model.tok.encode(p.text, false);
        CHECK(again == p.ids);
        CHECK(inside(again, model.vocab));
      }
    }
  }
}

TEST_CASE("GPT-2's tokenizer merges ids drawn below 32,000 into ids past it, which the generator repairs") {
  // vLLM's random dataset as is (draw, decode, send) would send some of these prompts, and a
  // 32,000-id model refuses them with a 400: the round trip is not a formality.
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<token_id> draw(0, 31999);
  int refused = 0;
  for (int i = 0; i < 200; ++i) {
    std::vector<token_id> ids(128);
    for (auto& id : ids)
      id = draw(rng);
    refused += !inside(gpt2().encode(gpt2().decode(ids, true), false), 32000);
  }
  CHECK(refused > 0);

  local_codec codec(gpt2());
  prompt_generator prompts(codec, 32000);
  for (int i = 0; i < 200; ++i) {
    auto p = prompts.make(128, rng);
    CHECK(p.ids.size() == 128);
    CHECK(inside(gpt2().encode(p.text, false), 32000));
  }
}

TEST_CASE("the same seed gives the same prompts and another seed others") {
  for (const auto& model : both_tokenizers()) {
    CAPTURE(model.name);
    local_codec codec(model.tok);
    prompt_generator prompts(codec, model.vocab);
    auto batch = [&](std::uint64_t seed) {
      std::mt19937_64 rng(seed);
      std::vector<std::string> texts;
      for (int i = 0; i < 10; ++i)
        texts.push_back(prompts.make(50, rng).text);
      return texts;
    };
    auto a = batch(42), b = batch(42), c = batch(43);
    CHECK(a == b);
    for (std::size_t i = 0; i < a.size(); ++i)
      CHECK(a[i] != c[i]);
  }
}

TEST_CASE("a shared prefix is the same text and the same ids at the start of every prompt") {
  for (const auto& model : both_tokenizers()) {
    CAPTURE(model.name);
    local_codec codec(model.tok);
    prompt_generator prompts(codec, model.vocab);
    std::mt19937_64 rng(3);
    const auto prefix = prompts.make(100, rng);
    REQUIRE(prefix.ids.size() == 100);
    std::set<std::string> tails;
    for (int i = 0; i < 50; ++i) {
      auto p = prompts.make(20, rng, prefix);
      CAPTURE(p.text);
      CHECK(p.text.starts_with(prefix.text));
      REQUIRE(p.ids.size() == 120);
      CHECK(std::equal(prefix.ids.begin(), prefix.ids.end(), p.ids.begin()));
      CHECK(model.tok.encode(p.text, false) == p.ids);
      CHECK(inside(p.ids, model.vocab));
      tails.insert(p.text.substr(prefix.text.size()));
    }
    CHECK(tails.size() == 50);
  }
}

TEST_CASE("a vocabulary no prompt fits fails with a message naming the limit") {
  // Under a 1-id limit every prompt is "!!!...", which GPT-2 merges into ids past it.
  local_codec codec(gpt2());
  prompt_generator prompts(codec, 1, 4);
  std::mt19937_64 rng(0);
  CHECK_THROWS_WITH_AS(prompts.make(8, rng),
                       doctest::Contains("could not make a prompt of 8 tokens with every id below 1 in 4 tries"),
                       prompt_error);
  CHECK_THROWS_AS(prompt_generator(codec, 0), std::invalid_argument);
}
