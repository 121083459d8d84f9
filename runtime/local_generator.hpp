// Generation without actors: runs a set of prompts to completion on one
// model_runner, batching them together every step, with chunked prefill and a
// fixed block layout. troupe-generate and the runtime tests use it; the actor
// engine replaces the fixed layout with the block manager and the scheduler.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/finish_check.hpp"
#include "runtime/model_runner.hpp"
#include "runtime/sampling_params.hpp"
#include "runtime/structured/constraint_cache.hpp"
#include "runtime/tokenizer.hpp"

namespace troupe::runtime {

struct generation_request {
  std::vector<token_id> prompt_ids;
  sampling_params params;
  std::uint64_t seed = 0; // used when params.seed is empty
};

struct generation_result {
  std::vector<token_id> output_ids; // includes a final stop token id, if one ended the sequence
  std::string text;                 // detokenized output, stop strings and stop tokens excluded
  finish_reason reason = finish_reason::length;
};

class local_generator {
 public:
  struct options {
    int prefill_chunk = 0; // tokens per prefill step; 0 = whole prompt in one step
  };
  // default_stop_ids: the model's stop ids (dropped per request by ignore_eos).
  local_generator(model_runner& runner, const tokenizer& tok, std::vector<token_id> default_stop_ids, options opts);

  // on_text(i, piece) streams request i's text as it becomes final.
  using text_callback = std::function<void(std::size_t, std::string_view)>;
  std::vector<generation_result> run(const std::vector<generation_request>& requests,
                                     const text_callback& on_text = {});

  std::uint64_t steps_run() const { return steps_; }

 private:
  model_runner& runner_;
  const tokenizer& tok_;
  std::vector<token_id> default_stop_ids_;
  options opts_;
  std::uint64_t steps_ = 0;
  std::shared_ptr<structured::constraint_cache> constraints_; // built at the first constrained request
};

} // namespace troupe::runtime
