// Reads the shared sampling fields: their JSON types, the server's own limits (max_tokens,
// stop strings, logprobs) and what fits the engine's types; the ranges of the values are
// sampling_params::validate's alone (troupe/sampling_params.hpp), checked last.
#include "net/sampling_fields.hpp"

#include <charconv>
#include <limits>

#include "net/json_fields.hpp"
#include "net/structured_output_fields.hpp"
#include "troupe/errors.hpp"

namespace troupe::net {

namespace {
constexpr std::int64_t int32_max = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t int32_min = std::numeric_limits<std::int32_t>::min();

// A number stored as a float; its range is checked by validate_sampling.
std::optional<float> read_float(const boost::json::object& body, std::string_view name) {
  auto x = read_number(body, name);
  return x ? std::optional<float>(static_cast<float>(*x)) : std::nullopt;
}

// An integer stored as an int: it must fit one; its range is checked by validate_sampling.
std::optional<int> read_int32(const boost::json::object& body, std::string_view name) {
  auto n = read_int(body, name);
  if (!n)
    return std::nullopt;
  require(*n >= int32_min && *n <= int32_max, std::string(name) + " is out of range, got " + std::to_string(*n),
          std::string(name));
  return static_cast<int>(*n);
}

std::vector<std::string> read_stop(const boost::json::value& stop, const request_limits& limits) {
  std::vector<std::string> out;
  auto add = [&](const boost::json::value& s) {
    auto text = to_string(s, "stop");
    require(text.size() <= limits.max_stop_length,
            "stop strings must be at most " + std::to_string(limits.max_stop_length) + " bytes long", "stop");
    out.emplace_back(text);
  };
  if (stop.is_string()) {
    add(stop);
    return out;
  }
  if (!stop.is_array())
    reject("'stop' must be a string or an array of strings", "stop");
  require(stop.get_array().size() <= limits.max_stop_strings,
          "at most " + std::to_string(limits.max_stop_strings) + " stop strings are allowed, got " +
              std::to_string(stop.get_array().size()),
          "stop");
  for (const auto& s : stop.get_array())
    add(s);
  return out;
}

std::vector<token_id> read_stop_token_ids(const boost::json::value& ids) {
  if (!ids.is_array())
    reject("'stop_token_ids' must be an array of integers", "stop_token_ids");
  std::vector<token_id> out;
  out.reserve(ids.get_array().size());
  for (const auto& id : ids.get_array()) {
    auto x = to_int(id, "stop_token_ids");
    require(x >= int32_min && x <= int32_max, "stop_token_ids must be token ids >= 0, got " + std::to_string(x),
            "stop_token_ids");
    out.push_back(static_cast<token_id>(x));
  }
  return out;
}

// OpenAI's logit_bias: {"<token id>": bias, ...}. The keys must be whole numbers; the count,
// the ranges and distinct ids are validate_sampling's, the vocabulary the engine's.
std::vector<token_bias> read_logit_bias(const boost::json::value& bias) {
  if (!bias.is_object())
    reject("'logit_bias' must be an object mapping token ids to biases", "logit_bias");
  std::vector<token_bias> out;
  out.reserve(bias.get_object().size());
  for (const auto& [key, value] : bias.get_object()) {
    const std::string_view text = key;
    std::int64_t id = -1;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
    require(ec == std::errc() && end == text.data() + text.size() && id >= 0 && id <= int32_max,
            "logit_bias keys must be token ids (whole numbers >= 0), got \"" + std::string(text) + "\"", "logit_bias");
    const double x = to_number(value, "logit_bias");
    out.push_back({static_cast<token_id>(id), static_cast<float>(x)});
  }
  return out;
}

std::optional<std::uint64_t> read_seed(const boost::json::object& body) {
  auto* seed = find_field(body, "seed");
  if (!seed)
    return std::nullopt;
  // vLLM takes any 64-bit integer; a negative one keeps its bits.
  if (seed->is_uint64())
    return seed->get_uint64();
  return static_cast<std::uint64_t>(to_int(*seed, "seed"));
}
} // namespace

std::optional<int> read_max_tokens(const boost::json::object& body, std::string_view name,
                                   const request_limits& limits) {
  auto n = read_int(body, name);
  if (!n)
    return std::nullopt;
  require(*n >= 1, std::string(name) + " must be at least 1, got " + std::to_string(*n), std::string(name));
  require(
      *n <= limits.max_tokens_limit,
      std::string(name) + " must be at most " + std::to_string(limits.max_tokens_limit) + ", got " + std::to_string(*n),
      std::string(name));
  return static_cast<int>(*n);
}

int read_logprobs_count(const boost::json::object& body, std::string_view name, const request_limits& limits) {
  auto n = read_int(body, name);
  if (!n)
    return -1;
  require(*n >= 0 && *n <= limits.max_logprobs,
          std::string(name) + " must be in [0, " + std::to_string(limits.max_logprobs) + "], got " + std::to_string(*n),
          std::string(name));
  return static_cast<int>(*n);
}

void read_sampling_fields(const boost::json::object& body, const request_limits& limits, int default_max_tokens,
                          request_spec& spec) {
  auto& p = spec.params;
  p.max_tokens = read_max_tokens(body, "max_tokens", limits).value_or(default_max_tokens);
  if (auto n = read_int32(body, "min_tokens"))
    p.min_tokens = *n;
  if (auto* bias = find_field(body, "logit_bias"))
    p.logit_bias = read_logit_bias(*bias);
  if (auto x = read_float(body, "temperature"))
    p.temperature = *x;
  if (auto x = read_float(body, "top_p"))
    p.top_p = *x;
  if (auto k = read_int32(body, "top_k"))
    p.top_k = *k;
  if (auto x = read_float(body, "min_p"))
    p.min_p = *x;
  p.seed = read_seed(body);
  if (auto x = read_float(body, "repetition_penalty"))
    p.repetition_penalty = *x;
  if (auto x = read_float(body, "frequency_penalty"))
    p.frequency_penalty = *x;
  if (auto x = read_float(body, "presence_penalty"))
    p.presence_penalty = *x;
  if (auto* stop = find_field(body, "stop"))
    p.stop = read_stop(*stop, limits);
  if (auto* ids = find_field(body, "stop_token_ids"))
    p.stop_token_ids = read_stop_token_ids(*ids);
  if (auto b = read_bool(body, "ignore_eos"))
    p.ignore_eos = *b;
  p.prompt_logprobs = read_logprobs_count(body, "prompt_logprobs", limits);
  if (auto k = read_int(body, "num_speculative_tokens")) {
    require(*k >= 0 && *k <= 16, "num_speculative_tokens must be in [0, 16], got " + std::to_string(*k),
            "num_speculative_tokens");
    spec.num_speculative_tokens = static_cast<int>(*k);
  }
  if (auto priority = read_int32(body, "priority"))
    spec.priority = *priority;
  if (auto n = read_int32(body, "n"))
    p.n = *n;
  if (auto best_of = read_int32(body, "best_of"))
    p.best_of = *best_of;
  p.constraint = read_output_constraint(body);
}

void validate_sampling(const sampling_params& params) {
  try {
    params.validate();
  } catch (const invalid_argument_error& e) {
    reject(e.what(), e.param);
  }
}

} // namespace troupe::net
