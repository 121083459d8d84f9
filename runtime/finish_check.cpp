// The stop/length rule, written once.
#include "runtime/finish_check.hpp"

#include <algorithm>

namespace troupe::runtime {

std::string_view to_string(finish_reason reason) {
  switch (reason) {
    case finish_reason::none:
      return "";
    case finish_reason::stop:
      return "stop";
    case finish_reason::length:
      return "length";
  }
  return "";
}

finish_reason finish_after(token_id last, std::span<const token_id> stop_ids, int num_output, int num_tokens,
                           const finish_limits& limits) {
  // A stop id wins over the length limit on the same token: the client sees why it ended.
  if (num_output > limits.min_tokens && std::find(stop_ids.begin(), stop_ids.end(), last) != stop_ids.end())
    return finish_reason::stop;
  if (num_output >= limits.max_tokens || num_tokens >= limits.max_model_len)
    return finish_reason::length;
  return finish_reason::none;
}

std::vector<token_id> stop_ids_for(const sampling_params& params, std::span<const token_id> model_defaults) {
  std::vector<token_id> ids = params.stop_token_ids;
  if (!params.ignore_eos)
    ids.insert(ids.end(), model_defaults.begin(), model_defaults.end());
  return ids;
}

} // namespace troupe::runtime
