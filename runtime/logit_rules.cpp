// A request's logit rules, and the host's application of them (the device's reference).
#include "runtime/logit_rules.hpp"

#include <algorithm>
#include <limits>

namespace troupe::runtime {

logit_edits logit_rules::at(std::uint64_t output_index) const {
  const bool masking = output_index < static_cast<std::uint64_t>(std::max(min_tokens, 0));
  return {bias, masking ? std::span<const token_id>(stop_ids) : std::span<const token_id>{}};
}

logit_rules logit_rules_for(const sampling_params& params, std::span<const token_id> stop_ids) {
  logit_rules rules;
  rules.bias = params.logit_bias;
  std::sort(rules.bias.begin(), rules.bias.end(), [](const token_bias& a, const token_bias& b) { return a.id < b.id; });
  rules.constraint = params.constraint;
  if (params.min_tokens > 0 || !params.constraint.empty()) {
    rules.min_tokens = params.min_tokens;
    rules.stop_ids.assign(stop_ids.begin(), stop_ids.end());
    std::sort(rules.stop_ids.begin(), rules.stop_ids.end());
    rules.stop_ids.erase(std::unique(rules.stop_ids.begin(), rules.stop_ids.end()), rules.stop_ids.end());
  }
  return rules;
}

void apply_logit_edits(std::span<float> logits, const logit_edits& edits) {
  const auto vocab = static_cast<token_id>(logits.size());
  for (const auto& b : edits.bias)
    if (b.id >= 0 && b.id < vocab)
      logits[static_cast<std::size_t>(b.id)] += b.bias;
  for (auto id : edits.banned)
    if (id >= 0 && id < vocab)
      logits[static_cast<std::size_t>(id)] = -std::numeric_limits<float>::infinity();
}

} // namespace troupe::runtime
