// bos / eos ids from generation_config.json and config.json, and the default stop ids
// (eos plus model-card knowledge, or the caller's explicit list).
#include "runtime/generation_config.hpp"

#include "runtime/errors.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <limits>
#include <string>
#include <system_error>

namespace troupe::runtime {

namespace {

namespace json = boost::json;

std::string show(const json::value& v) {
  std::string text = json::serialize(v);
  if (text.size() > 60)
    text = text.substr(0, 57) + "...";
  return text;
}

std::optional<int32_t> as_token_id(const json::value& v) {
  if (v.is_int64() && v.get_int64() >= 0 && v.get_int64() <= std::numeric_limits<int32_t>::max())
    return static_cast<int32_t>(v.get_int64());
  if (v.is_uint64() && v.get_uint64() <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
    return static_cast<int32_t>(v.get_uint64());
  return std::nullopt;
}

void append_unique(std::vector<int32_t>& ids, int32_t id) {
  if (std::find(ids.begin(), ids.end(), id) == ids.end())
    ids.push_back(id);
}

// Known models whose stopping behaviour is documented only in their model card.
//
// stories260K (llama2.c "tinyllamas", models/stories260k): llama2.c's training data puts
// BOS (id 1) between stories and never contains EOS, so the model ends a story by
// emitting BOS; llama2.c's run.c stops there. Its converted generation_config.json only
// says eos 2, which the model never produces.
//
// Detection is by the complete architecture fingerprint in config.json (family, every
// shape, context length, tied embeddings) plus bos id 1. These exact shapes come from
// llama2.c's stories260K recipe (dim 64, 5 layers, 8 heads, 4 kv heads, 512-token
// vocab, 512 context); a different model with all of them equal would be a llama2.c
// model trained the same way, with the same BOS-as-separator habit. Conversions of the
// same weights to another dtype or to shards still match, which a file checksum would
// not. Anything the table misses can be handled by the caller's override list.
struct fingerprint {
  std::string_view model;
  std::string_view reason;
  std::string_view model_type;
  int hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, vocab_size,
      max_position_embeddings;
  bool tie_word_embeddings;
  int32_t bos_token_id; // must equal generation_config's bos; it is the extra stop id
};

constexpr fingerprint known_models[] = {
    {"stories260K (llama2.c tinyllamas)",
     "trained with BOS as the separator between stories and never saw EOS; llama2.c run.c stops on BOS", "llama", 64,
     172, 5, 8, 4, 8, 512, 512, true, 1},
};

} // namespace

generation_config parse_generation_config(std::string_view json_text, std::string_view source_name) {
  const std::string source(source_name);
  std::error_code ec;
  const json::value root = json::parse(json_text, ec);
  if (ec)
    throw model_error(source + ": not valid JSON (" + ec.message() + ")");
  if (!root.is_object())
    throw model_error(source + ": not a JSON object");
  const json::object& object = root.get_object();

  generation_config result;
  if (const json::value* bos = object.if_contains("bos_token_id"); bos != nullptr && !bos->is_null()) {
    result.bos_token_id = as_token_id(*bos);
    if (!result.bos_token_id)
      throw model_error(source + ": bos_token_id must be a non-negative 32-bit integer or null, got " + show(*bos));
  }
  if (const json::value* eos = object.if_contains("eos_token_id"); eos != nullptr && !eos->is_null()) {
    const auto bad = [&] {
      return model_error(
          source + ": eos_token_id must be a non-negative 32-bit integer, a list of them, or null, got " + show(*eos));
    };
    if (eos->is_array()) {
      for (const json::value& item : eos->get_array()) {
        const std::optional<int32_t> id = as_token_id(item);
        if (!id)
          throw bad();
        append_unique(result.eos_token_ids, *id);
      }
    } else {
      const std::optional<int32_t> id = as_token_id(*eos);
      if (!id)
        throw bad();
      result.eos_token_ids.push_back(*id);
    }
  }
  return result;
}

generation_config load_generation_config(const std::filesystem::path& model_dir) {
  std::error_code ec;
  const auto read_if_present = [&ec](const std::filesystem::path& path) {
    if (!std::filesystem::exists(path, ec))
      return generation_config{};
    return parse_generation_config(read_text_file(path), path.string());
  };
  const generation_config from_config = read_if_present(model_dir / "config.json");
  generation_config result = read_if_present(model_dir / "generation_config.json");
  if (!result.bos_token_id)
    result.bos_token_id = from_config.bos_token_id;
  if (result.eos_token_ids.empty())
    result.eos_token_ids = from_config.eos_token_ids;
  return result;
}

std::optional<known_stop_rule> find_known_stop_rule(const generation_config& gen, const model_config& cfg) {
  for (const fingerprint& f : known_models) {
    if (cfg.model_type == f.model_type && cfg.hidden_size == f.hidden_size &&
        cfg.intermediate_size == f.intermediate_size && cfg.num_hidden_layers == f.num_hidden_layers &&
        cfg.num_attention_heads == f.num_attention_heads && cfg.num_key_value_heads == f.num_key_value_heads &&
        cfg.head_dim == f.head_dim && cfg.vocab_size == f.vocab_size &&
        cfg.max_position_embeddings == f.max_position_embeddings && cfg.tie_word_embeddings == f.tie_word_embeddings &&
        gen.bos_token_id == f.bos_token_id)
      return known_stop_rule{f.model, f.reason, {f.bos_token_id}};
  }
  return std::nullopt;
}

std::vector<int32_t> default_stop_token_ids(const generation_config& gen, const model_config& cfg,
                                            std::optional<std::span<const int32_t>> override_ids) {
  std::vector<int32_t> ids;
  if (override_ids) {
    for (const int32_t id : *override_ids)
      append_unique(ids, id);
    return ids;
  }
  for (const int32_t id : gen.eos_token_ids)
    append_unique(ids, id);
  if (const std::optional<known_stop_rule> rule = find_known_stop_rule(gen, cfg))
    for (const int32_t id : rule->extra_stop_ids)
      append_unique(ids, id);
  return ids;
}

} // namespace troupe::runtime
