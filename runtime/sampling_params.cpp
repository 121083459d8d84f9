// The range checks of sampling_params: the only place they are written. The engine
// runs them on every request it admits, net/ on every request it parses.
#include "troupe/sampling_params.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

#include "troupe/errors.hpp"

namespace troupe {

namespace {
// The shortest text that reads back as the same value (0.7, 2.01, 1e+20), as clients wrote it.
std::string shown(float x) {
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, x);
  return ec == std::errc() ? std::string(buffer, end) : std::to_string(x);
}
std::string shown(int x) {
  return std::to_string(x);
}

void require(bool ok, const char* param, const std::string& message) {
  if (!ok)
    throw invalid_argument_error(message, param);
}
// A float in [lo, hi] (lo excluded when lo_open).
void require_range(float x, const char* param, float lo, float hi, bool lo_open = false) {
  const bool ok = std::isfinite(x) && (lo_open ? x > lo : x >= lo) && x <= hi;
  require(ok, param,
          std::string(param) + " must be in " + (lo_open ? "(" : "[") + shown(lo) + ", " + shown(hi) + "], got " +
              shown(x));
}
} // namespace

const char* to_string(output_constraint::kind k) {
  switch (k) {
    case output_constraint::kind::none:
      return "none";
    case output_constraint::kind::json_object:
      return "json_object";
    case output_constraint::kind::json_schema:
      return "json_schema";
    case output_constraint::kind::regex:
      return "regex";
    case output_constraint::kind::choice:
      return "choice";
    case output_constraint::kind::grammar:
      return "grammar";
    case output_constraint::kind::tool_calls:
      return "tool_calls";
  }
  return "unknown";
}

void sampling_params::validate() const {
  require_range(temperature, "temperature", 0.0f, max_temperature);
  require_range(top_p, "top_p", 0.0f, 1.0f, /*lo_open=*/true);
  require(top_k >= -1, "top_k", "top_k must be -1, 0 (off) or positive, got " + shown(top_k));
  require_range(min_p, "min_p", 0.0f, 1.0f);
  require(std::isfinite(repetition_penalty) && repetition_penalty > 0.0f, "repetition_penalty",
          "repetition_penalty must be > 0, got " + shown(repetition_penalty));
  require_range(frequency_penalty, "frequency_penalty", -2.0f, 2.0f);
  require_range(presence_penalty, "presence_penalty", -2.0f, 2.0f);
  require(max_tokens >= 1, "max_tokens", "max_tokens must be at least 1, got " + shown(max_tokens));
  require(logprobs >= -1 && logprobs <= max_logprobs, "logprobs",
          "logprobs must be in [0, " + shown(max_logprobs) + "], got " + shown(logprobs));
  require(prompt_logprobs >= -1 && prompt_logprobs <= max_logprobs, "prompt_logprobs",
          "prompt_logprobs must be in [0, " + shown(max_logprobs) + "], got " + shown(prompt_logprobs));
  for (const auto& s : stop)
    require(!s.empty(), "stop", "stop strings must not be empty");
  for (auto id : stop_token_ids)
    require(id >= 0, "stop_token_ids", "stop_token_ids must be token ids >= 0, got " + shown(id));
  require(min_tokens >= 0 && min_tokens <= max_tokens, "min_tokens",
          "min_tokens must be in [0, max_tokens = " + shown(max_tokens) + "], got " + shown(min_tokens));
  require(logit_bias.size() <= static_cast<std::size_t>(max_logit_bias_entries), "logit_bias",
          "logit_bias may have at most " + shown(max_logit_bias_entries) + " entries, got " +
              std::to_string(logit_bias.size()));
  std::vector<token_id> ids;
  for (const auto& b : logit_bias) {
    require(b.id >= 0, "logit_bias", "logit_bias keys must be token ids >= 0, got " + shown(b.id));
    require(std::isfinite(b.bias) && b.bias >= -max_logit_bias && b.bias <= max_logit_bias, "logit_bias",
            "logit_bias values must be in [" + shown(-max_logit_bias) + ", " + shown(max_logit_bias) + "], got " +
                shown(b.bias) + " for token " + shown(b.id));
    ids.push_back(b.id);
  }
  const auto& c = constraint;
  const char* param = c.type == output_constraint::kind::json_schema || c.type == output_constraint::kind::json_object
                          ? "response_format"
                      : c.type == output_constraint::kind::regex  ? "guided_regex"
                      : c.type == output_constraint::kind::choice     ? "guided_choice"
                      : c.type == output_constraint::kind::tool_calls ? "tools"
                                                                      : "guided_grammar";
  if (!c.empty()) {
    require(c.text.size() <= max_constraint_text_bytes, param,
            std::string("the ") + to_string(c.type) + " constraint may have at most " +
                std::to_string(max_constraint_text_bytes) + " bytes, got " + std::to_string(c.text.size()));
    const bool needs_text = c.type == output_constraint::kind::json_schema ||
                            c.type == output_constraint::kind::regex || c.type == output_constraint::kind::grammar ||
                            c.type == output_constraint::kind::tool_calls;
    require(!needs_text || !c.text.empty(), param, std::string("the ") + to_string(c.type) + " constraint is empty");
    if (c.type == output_constraint::kind::choice) {
      require(!c.choices.empty() && c.choices.size() <= static_cast<std::size_t>(max_constraint_choices), param,
              "guided_choice must list 1 to " + shown(max_constraint_choices) + " strings, got " +
                  std::to_string(c.choices.size()));
      std::size_t total = 0;
      for (const auto& choice : c.choices) {
        require(!choice.empty(), param, "guided_choice strings must not be empty");
        total += choice.size();
      }
      require(total <= max_constraint_text_bytes, param,
              "guided_choice strings may have at most " + std::to_string(max_constraint_text_bytes) +
                  " bytes together, got " + std::to_string(total));
    }
    // The constraint ends the output with a stop id once it is complete: without one the output
    // could only run on past the constraint or stop mid-sentence.
    require(!ignore_eos, "ignore_eos", "ignore_eos cannot be combined with a structured-output constraint");
  }
  require(n >= 1 && n <= max_choices, "n", "n must be in [1, " + shown(max_choices) + "], got " + shown(n));
  require(best_of == 0 || (best_of >= n && best_of <= max_choices), "best_of",
          "best_of must be in [n = " + shown(n) + ", " + shown(max_choices) + "], got " + shown(best_of));
  std::sort(ids.begin(), ids.end());
  const auto twice = std::adjacent_find(ids.begin(), ids.end());
  require(twice == ids.end(), "logit_bias",
          "logit_bias names token " + (twice == ids.end() ? std::string() : shown(*twice)) + " twice");
}

} // namespace troupe
