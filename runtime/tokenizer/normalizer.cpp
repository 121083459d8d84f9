// The normalizer steps we support and how they are read from tokenizer.json; anything
// else is refused at load time rather than silently encoding differently.
#include "runtime/tokenizer/normalizer.hpp"

#include "runtime/tokenizer/utf8.hpp"

#include <string_view>

namespace troupe::runtime::tokenizer_detail {

void normalize(std::span<const normalizer_step> steps, std::string& s) {
  for (const auto& step : steps) {
    switch (step.what) {
      case normalizer_step::kind::prepend:
        if (!s.empty())
          s.insert(0, step.a);
        break;
      case normalizer_step::kind::replace:
        if (s.find(step.a) != std::string::npos)
          s = replace_all(s, step.a, step.b);
        break;
      case normalizer_step::kind::strip: {
        std::size_t end = step.right ? trailing_space_start(s) : s.size();
        std::size_t begin = step.left ? leading_space_len(std::string_view(s).substr(0, end)) : 0;
        s = s.substr(begin, end - begin);
        break;
      }
    }
  }
}

void load_normalizer(const json_file& f, const boost::json::value& v, std::vector<normalizer_step>& steps) {
  const auto& o = f.object(v, "normalizer");
  const auto type = f.type(o, "normalizer");
  if (type == "Sequence") {
    for (const auto& n : f.array(f.required(o, "normalizers", "normalizer Sequence"), "normalizers")) {
      load_normalizer(f, n, steps);
    }
  } else if (type == "Prepend") {
    steps.push_back(
        {normalizer_step::kind::prepend, f.string(f.required(o, "prepend", "normalizer Prepend"), "prepend"), {}});
  } else if (type == "Replace") {
    const auto pattern = read_pattern(f, o, "normalizer Replace");
    if (pattern.is_regex)
      f.fail("normalizer Replace with a Regex pattern is not supported");
    if (pattern.text.empty())
      f.fail("normalizer Replace has an empty pattern");
    steps.push_back({normalizer_step::kind::replace, pattern.text,
                     f.string(f.required(o, "content", "normalizer Replace"), "content")});
  } else if (type == "NFC") {
    // No Unicode normalization library is available, so NFC is taken as the identity: exact
    // for text that is already NFC (nearly all real input), slightly off for decomposed
    // input (e.g. "e" + U+0301 stays two characters).
  } else if (type == "Strip") {
    steps.push_back(
        {normalizer_step::kind::strip, {}, {}, f.flag(o, "strip_left", true), f.flag(o, "strip_right", true)});
  } else {
    f.fail("normalizer type '" + type + "' is not supported");
  }
}

} // namespace troupe::runtime::tokenizer_detail
