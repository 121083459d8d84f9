// The served model's tokenizer over HTTP, for building prompts before a run: POST /tokenize
// and /detokenize (vLLM's shapes, which troupe-serve answers on the port of every transport),
// and the model's vocabulary size found from what /detokenize accepts.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "apps/troupe-bench/load/endpoint.hpp"
#include "apps/troupe-bench/load/prompt_generator.hpp"

namespace troupe::bench {

// One keep-alive connection, used from one thread; requests are synchronous.
class tokenizer_client final : public token_codec {
 public:
  // Connects to the server's host and port; throws unreachable_error when it cannot.
  explicit tokenizer_client(const endpoint& server);

  // {"prompt": text, "add_special_tokens": false} -> "tokens". Throws std::runtime_error
  // with the server's answer when it is not 200 (a server without /tokenize: 404).
  std::vector<token_id> encode(const std::string& text) override;
  // {"tokens": ids} -> "prompt" (the server skips special tokens).
  std::string decode(const std::vector<token_id>& ids) override;

  // The model's vocabulary size V. No route says it (/v1/models gives max_model_len only), but
  // /detokenize answers 200 for an id in [0, V) and 400 past it ("token id X is outside the
  // vocabulary"): a doubling then a bisection find V in about 2*log2(V) requests. Throws
  // std::runtime_error when the answers do not have that shape (id 0 refused, or every id taken).
  token_id probe_vocab_size();

 private:
  struct reply {
    unsigned status = 0;
    std::string body;
  };
  reply post(std::string_view target, std::string body);
  reply post_once(std::string_view target, const std::string& body);
  void connect();
  bool accepts(token_id id);

  endpoint server_;
  boost::asio::io_context ioc_;
  boost::beast::tcp_stream stream_;
  bool connected_ = false;
};

} // namespace troupe::bench
