// The decoder steps we support and how they are read from tokenizer.json. Each step
// records whether its input is still whole tokens or already one joined string, since
// several steps act differently on the two.
#include "runtime/tokenizer/decoder.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace troupe::runtime::tokenizer_detail {
namespace {

// Whether the steps so far have joined all tokens into one string.
bool decoders_joined(const std::vector<decoder_step>& steps) {
  return std::any_of(steps.begin(), steps.end(), [](const decoder_step& d) {
    return d.what == decoder_step::kind::fuse || d.what == decoder_step::kind::byte_level ||
           d.what == decoder_step::kind::join_with_space;
  });
}

} // namespace

void load_decoder(const json_file& f, const boost::json::value& v, std::vector<decoder_step>& steps) {
  const auto& o = f.object(v, "decoder");
  const auto type = f.type(o, "decoder");
  decoder_step step(decoder_step::kind::fuse);
  step.joined_input = decoders_joined(steps);
  if (type == "Sequence") {
    for (const auto& d : f.array(f.required(o, "decoders", "decoder Sequence"), "decoders")) {
      load_decoder(f, d, steps);
    }
    return;
  } else if (type == "Replace") {
    const auto pattern = read_pattern(f, o, "decoder Replace");
    if (pattern.is_regex)
      f.fail("decoder Replace with a Regex pattern is not supported");
    if (pattern.text.empty())
      f.fail("decoder Replace has an empty pattern");
    step.what = decoder_step::kind::replace;
    step.a = pattern.text;
    step.b = f.string(f.required(o, "content", "decoder Replace"), "content");
  } else if (type == "ByteFallback") {
    // Byte tokens only exist before a Fuse; after it this step could never fire.
    if (step.joined_input)
      f.fail("decoder ByteFallback after Fuse/ByteLevel is not supported");
    step.what = decoder_step::kind::byte_fallback;
  } else if (type == "Fuse") {
    step.what = decoder_step::kind::fuse;
  } else if (type == "Strip") {
    step.what = decoder_step::kind::strip;
    step.a = single_char(f, f.required(o, "content", "decoder Strip"), "Strip content");
    step.start = static_cast<std::size_t>(
        std::max<std::int64_t>(0, f.integer(f.required(o, "start", "decoder Strip"), "start")));
    step.stop =
        static_cast<std::size_t>(std::max<std::int64_t>(0, f.integer(f.required(o, "stop", "decoder Strip"), "stop")));
  } else if (type == "Metaspace") {
    step.what = decoder_step::kind::metaspace;
    step.a = single_char(f, f.required(o, "replacement", "decoder Metaspace"), "Metaspace replacement");
    if (const auto* s = f.field(o, "prepend_scheme")) {
      step.strip_first = f.string(*s, "prepend_scheme") != "never";
    } else {
      step.strip_first = f.flag(o, "add_prefix_space", true);
    }
  } else if (type == "ByteLevel") {
    // It needs whole tokens (a token is mapped back only if all its characters are
    // stand-ins), which no longer exist after a Fuse.
    if (step.joined_input)
      f.fail("decoder ByteLevel after Fuse is not supported");
    step.what = decoder_step::kind::byte_level;
  } else {
    f.fail("decoder type '" + type + "' is not supported");
  }
  steps.push_back(std::move(step));
}

} // namespace troupe::runtime::tokenizer_detail
