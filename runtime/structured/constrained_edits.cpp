// A constrained row's edits (see constrained_edits.hpp).
#include "runtime/structured/constrained_edits.hpp"

#include <algorithm>
#include <iterator>

namespace troupe::runtime::structured {

logit_edits constrained_edits(sequence_constraint& constraint, const logit_rules& rules, std::uint64_t output_index,
                              std::span<const token_id> output, std::vector<token_id>& storage) {
  auto e = rules.at(output_index);
  if (!constraint.banned_after(output, rules.stop_ids, storage))
    return e;
  if (!e.banned.empty()) {
    std::vector<token_id> merged;
    std::set_union(storage.begin(), storage.end(), e.banned.begin(), e.banned.end(), std::back_inserter(merged));
    if (merged.size() < static_cast<std::size_t>(constraint.constraint().vocabulary().size()))
      storage.swap(merged);
  }
  e.banned = storage;
  return e;
}

} // namespace troupe::runtime::structured
