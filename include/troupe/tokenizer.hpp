// A model's tokenizer for a host or a tool: text to token ids and back, exactly as
// the engine tokenizes (a Hugging Face tokenizer.json). Copies are cheap and share
// the loaded tables; one instance may be used from any number of threads.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "troupe/ids.hpp"

namespace troupe {

class tokenizer {
 public:
  // path: a tokenizer.json file or a model folder (tokenizer_config.json and
  // special_tokens_map.json next to it are read too). Throws model_error naming the
  // file and the problem.
  static tokenizer load(const std::string& path);

  // add_special_tokens: BOS / EOS as the tokenizer's post-processor (or its config) adds them.
  std::vector<token_id> encode(std::string_view text, bool add_special_tokens = true) const;

  // Ids the tokenizer does not know are dropped, as Hugging Face does; special tokens
  // are dropped too unless skip_special_tokens is false.
  std::string decode(std::span<const token_id> ids, bool skip_special_tokens = true) const;

  std::size_t vocab_size() const; // max id + 1 over the model's vocabulary and added tokens

 private:
  struct impl; // runtime's tokenizer (runtime/public_tokenizer.cpp)
  explicit tokenizer(std::shared_ptr<const impl> p) : impl_(std::move(p)) {}
  std::shared_ptr<const impl> impl_;
};

} // namespace troupe
