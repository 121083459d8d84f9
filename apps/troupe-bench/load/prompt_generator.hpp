// Random prompts the served model can take, made as vLLM's random dataset makes them: token
// ids drawn from the model's vocabulary, sent as their decoding, and checked by tokenizing
// that text back (the served tokenizer may merge the pieces into ids the model lacks).
#pragma once

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace troupe::bench {

using token_id = std::int32_t;

// The served model's tokenizer, as far as prompts need it: the server's /tokenize and
// /detokenize (tokenizer_client.hpp), or in tests runtime's tokenizer playing the server.
class token_codec {
 public:
  virtual ~token_codec() = default;
  // The ids of `text` with no special tokens added (the server adds BOS to each request).
  virtual std::vector<token_id> encode(const std::string& text) = 0;
  // The text of `ids`, special tokens skipped.
  virtual std::string decode(const std::vector<token_id>& ids) = 0;
};

// A prompt and what the served tokenizer makes of it.
struct token_prompt {
  std::string text;
  std::vector<token_id> ids; // encode(text): every id below the generator's limit
};

// No prompt of the asked length with every id below the limit came out of max_attempts tries.
class prompt_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class prompt_generator {
 public:
  // Ids are drawn uniformly from [0, id_limit): the model's vocabulary size, which may be
  // smaller than the tokenizer's (a dummy 13B shape lent GPT-2's 50,257-id tokenizer takes 32,000).
  prompt_generator(token_codec& codec, token_id id_limit, int max_attempts = 32);

  // A text that tokenizes to exactly prefix.ids followed by `len` more ids, all below the
  // limit, and starts with prefix.text (so prompts that share a prefix share its KV blocks).
  // Draws from `rng` only, so the same rng state and tokenizer give the same prompt.
  // Throws prompt_error when max_attempts repairs do not get there.
  token_prompt make(int len, std::mt19937_64& rng, const token_prompt& prefix = {});

  token_id id_limit() const { return id_limit_; }

 private:
  // Ids that repairs fill with: drawn once from the vocabulary and kept when three of them in
  // a row tokenize back to themselves (a word with its space, not a lone byte or a piece that
  // merges with itself). Found at the first repair; empty when none is found (then repairs draw).
  const std::vector<token_id>& fillers();

  token_codec& codec_;
  token_id id_limit_;
  int max_attempts_;
  std::vector<token_id> fillers_;
  bool fillers_searched_ = false;
};

} // namespace troupe::bench
