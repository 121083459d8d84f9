// Reads the optional files beside tokenizer.json. They can name bos / eos, ask for them to
// be added when tokenizer.json has no post-processor, and carry the chat template.
#include "runtime/tokenizer/tokenizer_config.hpp"

#include "runtime/errors.hpp"
#include "runtime/tokenizer/json_file.hpp"

#include <boost/json.hpp>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

namespace troupe::runtime::tokenizer_detail {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

// Reads "name" or {"content": "name"} (tokenizer_config.json / special_tokens_map.json).
std::optional<std::string> token_name(const json_file& f, const json::object& o, std::string_view key) {
  const auto* v = f.field(o, key);
  if (v == nullptr)
    return std::nullopt;
  if (v->is_string())
    return std::string(v->get_string());
  if (v->is_object())
    return f.string(f.required(v->get_object(), "content", key), key);
  f.fail("'" + std::string(key) + "' must be a string or {\"content\": ...}");
}

// A token name -> its id; added tokens win over the model's vocab.
std::optional<token_id> resolve(const json_file& f, const tokenizer::impl& t, const std::optional<std::string>& name,
                                std::string_view key) {
  if (!name)
    return std::nullopt;
  if (const auto it = t.added_ids.find(*name); it != t.added_ids.end())
    return it->second;
  if (const auto it = t.model.vocab.find(*name); it != t.model.vocab.end())
    return it->second;
  f.fail(std::string(key) + " '" + *name + "' is not in the vocab");
}

std::string read_text_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw model_error(path.string() + ": cannot be opened");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

} // namespace

void load_tokenizer_config(const fs::path& dir, tokenizer::impl& t) {
  std::error_code ec;
  bool add_bos = false, add_eos = false;
  std::optional<std::string> bos_name, eos_name;
  if (const auto path = dir / "tokenizer_config.json"; fs::is_regular_file(path, ec)) {
    const json_file f(path);
    const auto v = f.parse();
    const auto& o = f.object(v, "tokenizer_config.json");
    add_bos = f.flag(o, "add_bos_token", false);
    add_eos = f.flag(o, "add_eos_token", false);
    bos_name = token_name(f, o, "bos_token");
    eos_name = token_name(f, o, "eos_token");
    t.bos = resolve(f, t, bos_name, "bos_token");
    t.eos = resolve(f, t, eos_name, "eos_token");
    if (const auto* c = f.field(o, "chat_template")) {
      if (c->is_string()) {
        t.chat_template = std::string(c->get_string());
      } else if (c->is_array()) { // [{"name": ..., "template": ...}]: take "default"
        for (const auto& entry : c->get_array()) {
          const auto& e = f.object(entry, "chat_template entry");
          const auto* name = f.field(e, "name");
          if (t.chat_template.empty() || (name != nullptr && name->is_string() && name->get_string() == "default")) {
            t.chat_template = f.string(f.required(e, "template", "chat_template entry"), "template");
          }
        }
      } else {
        f.fail("chat_template must be a string or a list");
      }
    }
    if (!t.has_post_processor) {
      if (add_bos && !t.bos)
        f.fail("add_bos_token is true but there is no bos_token");
      if (add_eos && !t.eos)
        f.fail("add_eos_token is true but there is no eos_token");
      if (add_bos)
        t.prefix.push_back(*t.bos);
      if (add_eos)
        t.suffix.push_back(*t.eos);
    }
  }
  if (const auto path = dir / "special_tokens_map.json"; (!bos_name || !eos_name) && fs::is_regular_file(path, ec)) {
    const json_file f(path);
    const auto v = f.parse();
    const auto& o = f.object(v, "special_tokens_map.json");
    if (!bos_name)
      t.bos = resolve(f, t, token_name(f, o, "bos_token"), "bos_token");
    if (!eos_name)
      t.eos = resolve(f, t, token_name(f, o, "eos_token"), "eos_token");
  }
  if (const auto path = dir / "chat_template.jinja"; t.chat_template.empty() && fs::is_regular_file(path, ec)) {
    t.chat_template = read_text_file(path);
  }
  // Last resort: a template that wraps the text in one special token on each side.
  if (!t.bos && t.prefix.size() == 1)
    t.bos = t.prefix.front();
  if (!t.eos && t.suffix.size() == 1)
    t.eos = t.suffix.front();
}

} // namespace troupe::runtime::tokenizer_detail
