// The decoder chain: the steps (Replace, ByteFallback, Fuse, Strip, Metaspace, ByteLevel)
// that turn token strings back into text; decode_stream.cpp runs them.
#pragma once

#include "runtime/tokenizer/json_file.hpp"

#include <boost/json.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace troupe::runtime::tokenizer_detail {

struct decoder_step {
  enum class kind { replace, byte_fallback, fuse, strip, metaspace, byte_level, join_with_space };
  explicit decoder_step(kind k) : what(k) {}
  kind what;
  bool joined_input = false;       // an earlier step already joined all tokens into one
  std::string a, b;                // replace: a -> b; strip / metaspace: a = the character
  std::size_t start = 0, stop = 0; // strip
  bool strip_first = false;        // metaspace: drop the replacement in the first token
};

// Appends the steps of tokenizer.json's "decoder" (a Sequence is flattened). Without a
// decoder the loader adds join_with_space, Hugging Face's default.
void load_decoder(const json_file& f, const boost::json::value& v, std::vector<decoder_step>& steps);

} // namespace troupe::runtime::tokenizer_detail
