// The post-processor: the special tokens (BOS, CLS/SEP, ...) that encode() adds around the
// ids when add_special_tokens is set.
#pragma once

#include "runtime/tokenizer.hpp"
#include "runtime/tokenizer/json_file.hpp"

#include <boost/json.hpp>

#include <vector>

namespace troupe::runtime::tokenizer_detail {

// Reads tokenizer.json's "post_processor" (TemplateProcessing's single-sequence template,
// Roberta/BertProcessing, ByteLevel, or a Sequence of them) and adds its special tokens
// around what earlier processors added.
void load_post_processor(const json_file& f, const boost::json::value& v, std::vector<token_id>& prefix,
                         std::vector<token_id>& suffix);

} // namespace troupe::runtime::tokenizer_detail
