// The files that may sit next to tokenizer.json: tokenizer_config.json,
// special_tokens_map.json and chat_template.jinja.
#pragma once

#include "runtime/tokenizer/tokenizer_impl.hpp"

#include <filesystem>

namespace troupe::runtime::tokenizer_detail {

// Sets bos / eos and the chat template from the files in `dir` that exist, and (when
// tokenizer.json has no post-processor) the add_bos_token / add_eos_token prefix and
// suffix. Needs the vocab and added tokens already loaded.
void load_tokenizer_config(const std::filesystem::path& dir, tokenizer::impl& t);

} // namespace troupe::runtime::tokenizer_detail
