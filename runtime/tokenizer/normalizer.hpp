// The normalizer: the text edits (Prepend, Replace, Strip) applied before pre-tokenizing,
// and to the added tokens that match normalized text.
#pragma once

#include "runtime/tokenizer/json_file.hpp"

#include <boost/json.hpp>

#include <span>
#include <string>
#include <vector>

namespace troupe::runtime::tokenizer_detail {

struct normalizer_step {
  enum class kind { prepend, replace, strip } what;
  std::string a, b;                 // prepend: a; replace: a -> b
  bool left = false, right = false; // strip
};

// Applies the steps in order.
void normalize(std::span<const normalizer_step> steps, std::string& s);

// Appends the steps of tokenizer.json's "normalizer" (a Sequence is flattened).
void load_normalizer(const json_file& f, const boost::json::value& v, std::vector<normalizer_step>& steps);

} // namespace troupe::runtime::tokenizer_detail
