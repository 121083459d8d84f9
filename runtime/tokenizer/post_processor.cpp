// The post-processors we support and how they are read from tokenizer.json; only the
// single-sequence case matters here, so each reduces to a prefix and a suffix of ids.
#include "runtime/tokenizer/post_processor.hpp"

#include <string>
#include <string_view>

namespace troupe::runtime::tokenizer_detail {

void load_post_processor(const json_file& f, const boost::json::value& v, std::vector<token_id>& prefix,
                         std::vector<token_id>& suffix) {
  const auto& o = f.object(v, "post_processor");
  const auto type = f.type(o, "post_processor");
  std::vector<token_id> before, after;
  if (type == "Sequence") {
    for (const auto& p : f.array(f.required(o, "processors", "post_processor Sequence"), "processors")) {
      load_post_processor(f, p, prefix, suffix);
    }
    return;
  } else if (type == "ByteLevel") {
    // Only trims offsets; adds no tokens.
  } else if (type == "TemplateProcessing") {
    const auto& single = f.required(o, "single", "post_processor TemplateProcessing");
    if (!single.is_array())
      f.fail("TemplateProcessing 'single' must be a list of pieces");
    const auto* specials = f.field(o, "special_tokens");
    bool after_sequence = false;
    for (const auto& item_value : single.get_array()) {
      const auto& item = f.object(item_value, "TemplateProcessing piece");
      if (f.field(item, "Sequence") != nullptr) {
        after_sequence = true;
        continue;
      }
      const auto* special = f.field(item, "SpecialToken");
      if (special == nullptr)
        f.fail("TemplateProcessing piece must be a Sequence or a SpecialToken");
      const auto name =
          f.string(f.required(f.object(*special, "SpecialToken"), "id", "SpecialToken"), "SpecialToken.id");
      const boost::json::value* entry =
          specials != nullptr ? f.object(*specials, "special_tokens").if_contains(name) : nullptr;
      if (entry == nullptr)
        f.fail("TemplateProcessing names special token '" + name + "' that special_tokens does not define");
      for (const auto& id :
           f.array(f.required(f.object(*entry, "special_tokens entry"), "ids", "special_tokens entry"), "ids")) {
        (after_sequence ? after : before).push_back(f.id(id, "special token id"));
      }
    }
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    auto token_of = [&](std::string_view key) {
      const auto& pair = f.array(f.required(o, key, "post_processor " + type), key);
      if (pair.size() != 2)
        f.fail("post_processor " + type + " '" + std::string(key) + "' must be [token, id]");
      return f.id(pair[1], key);
    };
    before.push_back(token_of("cls"));
    after.push_back(token_of("sep"));
  } else {
    f.fail("post_processor type '" + type + "' is not supported");
  }
  prefix.insert(prefix.begin(), before.begin(), before.end());
  suffix.insert(suffix.end(), after.begin(), after.end());
}

} // namespace troupe::runtime::tokenizer_detail
