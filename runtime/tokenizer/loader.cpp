// tokenizer::load: reads tokenizer.json section by section (each stage reads its own
// section), builds the id tables, then reads the optional files beside it.
#include "runtime/tokenizer.hpp"

#include "runtime/errors.hpp"
#include "runtime/tokenizer/json_file.hpp"
#include "runtime/tokenizer/post_processor.hpp"
#include "runtime/tokenizer/tokenizer_config.hpp"
#include "runtime/tokenizer/tokenizer_impl.hpp"

#include <algorithm>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

namespace troupe::runtime {

namespace fs = std::filesystem;
using namespace tokenizer_detail;

tokenizer tokenizer::load(const std::filesystem::path& path) {
  std::error_code ec;
  fs::path file = path, dir = path.parent_path();
  if (fs::is_directory(path, ec)) {
    file = path / "tokenizer.json";
    dir = path;
    if (!fs::is_regular_file(file, ec))
      throw model_error(path.string() + ": no tokenizer.json in this folder");
  } else if (!fs::is_regular_file(path, ec)) {
    throw model_error(path.string() + ": no such file or folder");
  }
  if (dir.empty())
    dir = ".";

  auto t = std::make_shared<impl>();
  const json_file f(file);
  const auto root_value = f.parse();
  const auto& root = f.object(root_value, "the top level");
  load_model(f, f.required(root, "model", "the top level"), t->model);
  if (const auto* v = f.field(root, "added_tokens"))
    load_added_tokens(f, *v, t->added);
  if (const auto* v = f.field(root, "normalizer"))
    load_normalizer(f, *v, t->normalizers);
  if (const auto* v = f.field(root, "pre_tokenizer"))
    load_pre_tokenizer(f, *v, t->pre_tokenizers, t->byte_level_input);
  if (const auto* v = f.field(root, "decoder")) {
    load_decoder(f, *v, t->decoders);
  } else {
    t->decoders.emplace_back(decoder_step::kind::join_with_space); // Hugging Face's default
  }
  if (const auto* v = f.field(root, "post_processor")) {
    t->has_post_processor = true;
    load_post_processor(f, *v, t->prefix, t->suffix);
  }

  // Id tables: added tokens take precedence over the model's strings, as in Hugging Face.
  token_id max_id = -1;
  for (const auto& [s, id] : t->model.vocab)
    max_id = std::max(max_id, id);
  for (const auto& a : t->added)
    max_id = std::max(max_id, a.id);
  t->id_strings.resize(static_cast<std::size_t>(max_id + 1));
  t->id_flags.assign(t->id_strings.size(), 0);
  for (const auto& [s, id] : t->model.vocab) {
    t->id_strings[id] = s;
    t->id_flags[id] = id_known;
  }
  for (std::size_t i = 0; i < t->added.size(); ++i) {
    auto& a = t->added[i];
    t->id_strings[a.id] = a.content;
    t->id_flags[a.id] = id_known | (a.special ? id_special : 0);
    t->added_ids[a.content] = a.id;
    a.pattern = a.content;
    if (a.normalized)
      normalize(t->normalizers, a.pattern);
    (a.normalized ? t->normalized_matcher : t->raw_matcher).add(t->added, i);
  }
  for (const auto id : t->prefix) {
    if (id > max_id)
      f.fail("post_processor adds id " + std::to_string(id) + " that is not in the vocab");
  }
  for (const auto id : t->suffix) {
    if (id > max_id)
      f.fail("post_processor adds id " + std::to_string(id) + " that is not in the vocab");
  }
  load_tokenizer_config(dir, *t);
  return tokenizer(std::move(t));
}

} // namespace troupe::runtime
