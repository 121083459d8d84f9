// The playground's view of the server's limits, as JSON.
#include "net/playground_config.hpp"

#include <boost/json.hpp>

namespace troupe::net {

std::string playground_config(const model_info& info, const request_limits& limits) {
  boost::json::object out{
      {"model", info.name},
      {"chat_format", info.chat_format},
      {"max_model_len", info.max_model_len},
      {"max_tokens_limit", limits.max_tokens_limit},
      {"max_stop_strings", limits.max_stop_strings},
      {"max_stop_length", limits.max_stop_length},
      {"temperature_max", max_temperature}, // sampling_params::validate's range
  };
  return boost::json::serialize(out);
}

} // namespace troupe::net
