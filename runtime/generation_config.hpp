// Which token ids begin and end a generation: bos and eos from generation_config.json /
// config.json, plus the stop ids that only a model's card tells us about.
#pragma once

#include "runtime/model_config.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace troupe::runtime {

struct generation_config {
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids; // in file order, without duplicates
};

// Reads bos_token_id (integer or null) and eos_token_id (integer, list of integers or
// null) from one JSON object; other fields are ignored. Throws model_error naming the field.
generation_config parse_generation_config(std::string_view json_text,
                                          std::string_view source_name = "generation_config.json");

// Field by field: generation_config.json when it sets the field, else config.json.
// Either file may be absent; one that is present but malformed is a model_error.
generation_config load_generation_config(const std::filesystem::path& model_dir);

// Model-card knowledge that the model's files do not carry. Matched on the exact
// hyper-parameters in config.json (see generation_config.cpp for the table and why).
struct known_stop_rule {
  std::string_view model;  // e.g. "stories260K (llama2.c tinyllamas)"
  std::string_view reason; // one line for logs: why the extra ids stop generation
  std::vector<int32_t> extra_stop_ids;
};
std::optional<known_stop_rule> find_known_stop_rule(const generation_config& gen, const model_config& cfg);

// The ids that end a generation by default: override_ids exactly when given (the
// caller's explicit choice; an empty list means "stop on nothing"), else the eos ids
// plus any known_stop_rule's extra ids, without duplicates.
std::vector<int32_t> default_stop_token_ids(const generation_config& gen, const model_config& cfg,
                                            std::optional<std::span<const int32_t>> override_ids = std::nullopt);

} // namespace troupe::runtime
