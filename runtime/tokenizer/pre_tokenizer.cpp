// The pre-tokenizer steps we support and how they are read from tokenizer.json. Pieces
// keep track of whether they start the text, which Metaspace's "first" scheme needs.
#include "runtime/tokenizer/pre_tokenizer.hpp"

#include "runtime/tokenizer/utf8.hpp"

#include <stdexcept>
#include <string_view>
#include <utility>

namespace troupe::runtime::tokenizer_detail {
namespace {

// One piece of text on its way through the pre-tokenizers; at_origin marks the piece that
// starts at offset 0 of the original text (Metaspace's prepend_scheme "first").
struct piece {
  std::string text;
  bool at_origin = false;
};

void apply_split(std::vector<piece>& pieces, const pre_tokenizer_step& step) {
  std::vector<piece> out;
  out.reserve(pieces.size());
  auto emit = [&](const piece& from, std::size_t start, std::size_t end) {
    if (end > start)
      out.push_back({from.text.substr(start, end - start), from.at_origin && start == 0});
  };
  for (const auto& p : pieces) {
    std::size_t prev = 0;
    auto isolate = [&](std::size_t start, std::size_t end) {
      emit(p, prev, start);
      emit(p, start, end);
      prev = end;
    };
    if (step.re) {
      step.re->for_each_match(p.text, isolate);
    } else {
      for (auto hit = p.text.find(step.literal); hit != std::string::npos; hit = p.text.find(step.literal, prev)) {
        isolate(hit, hit + step.literal.size());
      }
    }
    emit(p, prev, p.text.size());
  }
  pieces = std::move(out);
}

void apply_metaspace(std::vector<piece>& pieces, const pre_tokenizer_step& step) {
  std::vector<piece> out;
  out.reserve(pieces.size());
  for (auto& p : pieces) {
    std::string text = replace_all(p.text, " ", step.replacement);
    const bool prepend = step.scheme == prepend_scheme::always || (step.scheme == prepend_scheme::first && p.at_origin);
    if (prepend && !text.starts_with(step.replacement))
      text.insert(0, step.replacement);
    if (!step.split) {
      out.push_back({std::move(text), p.at_origin});
      continue;
    }
    // Each replacement character starts a new piece (it stays with the text after it).
    std::size_t start = 0;
    for (auto hit = text.find(step.replacement, 1); hit != std::string::npos;
         hit = text.find(step.replacement, hit + 1)) {
      out.push_back({text.substr(start, hit - start), p.at_origin && start == 0});
      start = hit;
    }
    if (start < text.size())
      out.push_back({text.substr(start), p.at_origin && start == 0});
  }
  pieces = std::move(out);
}

regex compile(const json_file& f, const std::string& pattern, std::string_view where) {
  try {
    return regex(pattern);
  } catch (const std::invalid_argument& e) {
    f.fail(std::string(where) + ": invalid regex '" + pattern + "': " + e.what());
  }
}

// The GPT-2 split pattern that ByteLevel(use_regex: true) applies.
constexpr std::string_view gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

} // namespace

void pre_tokenize_segment(std::span<const pre_tokenizer_step> steps, std::string text, bool at_origin,
                          const std::function<void(std::string&&)>& on_piece) {
  std::vector<piece> pieces;
  pieces.push_back({std::move(text), at_origin});
  for (const auto& step : steps) {
    switch (step.what) {
      case pre_tokenizer_step::kind::byte_level:
        if (step.add_prefix_space) {
          for (auto& p : pieces) {
            if (!p.text.starts_with(' '))
              p.text.insert(0, " ");
          }
        }
        if (step.re)
          apply_split(pieces, step);
        break;
      case pre_tokenizer_step::kind::metaspace:
        apply_metaspace(pieces, step);
        break;
      case pre_tokenizer_step::kind::split_regex:
      case pre_tokenizer_step::kind::split_literal:
        apply_split(pieces, step);
        break;
    }
  }
  for (auto& p : pieces) {
    if (!p.text.empty())
      on_piece(std::move(p.text));
  }
}

void load_pre_tokenizer(const json_file& f, const boost::json::value& v, std::vector<pre_tokenizer_step>& steps,
                        bool& byte_level_input) {
  const auto& o = f.object(v, "pre_tokenizer");
  const auto type = f.type(o, "pre_tokenizer");
  if (byte_level_input) {
    // Our byte-level pieces keep raw text until BPE, so nothing may follow ByteLevel.
    f.fail("pre_tokenizer '" + type + "' after ByteLevel is not supported (ByteLevel must be last)");
  }
  if (type == "Sequence") {
    for (const auto& p : f.array(f.required(o, "pretokenizers", "pre_tokenizer Sequence"), "pretokenizers")) {
      load_pre_tokenizer(f, p, steps, byte_level_input);
    }
  } else if (type == "ByteLevel") {
    pre_tokenizer_step step(pre_tokenizer_step::kind::byte_level);
    step.add_prefix_space = f.flag(o, "add_prefix_space", true);
    if (f.flag(o, "use_regex", true))
      step.re = compile(f, std::string(gpt2_pattern), "pre_tokenizer ByteLevel");
    steps.push_back(std::move(step));
    byte_level_input = true;
  } else if (type == "Metaspace") {
    pre_tokenizer_step step(pre_tokenizer_step::kind::metaspace);
    step.replacement = single_char(f, f.required(o, "replacement", "pre_tokenizer Metaspace"), "Metaspace replacement");
    if (const auto* s = f.field(o, "prepend_scheme")) {
      const auto scheme = f.string(*s, "prepend_scheme");
      if (scheme == "always")
        step.scheme = prepend_scheme::always;
      else if (scheme == "first")
        step.scheme = prepend_scheme::first;
      else if (scheme == "never")
        step.scheme = prepend_scheme::never;
      else
        f.fail("Metaspace prepend_scheme '" + scheme + "' is unknown");
    } else {
      step.scheme = f.flag(o, "add_prefix_space", true) ? prepend_scheme::always : prepend_scheme::never;
    }
    step.split = f.flag(o, "split", true);
    steps.push_back(std::move(step));
  } else if (type == "Split") {
    const auto pattern = read_pattern(f, o, "pre_tokenizer Split");
    const auto behavior = f.string(f.required(o, "behavior", "pre_tokenizer Split"), "behavior");
    if (behavior != "Isolated")
      f.fail("pre_tokenizer Split behavior '" + behavior + "' is not supported (Isolated only)");
    if (f.flag(o, "invert", false))
      f.fail("pre_tokenizer Split with invert: true is not supported");
    if (pattern.text.empty())
      f.fail("pre_tokenizer Split has an empty pattern");
    pre_tokenizer_step step{pattern.is_regex ? pre_tokenizer_step::kind::split_regex
                                             : pre_tokenizer_step::kind::split_literal};
    if (pattern.is_regex)
      step.re = compile(f, pattern.text, "pre_tokenizer Split");
    else
      step.literal = pattern.text;
    steps.push_back(std::move(step));
  } else if (type == "Digits") {
    // Hugging Face splits on char::is_numeric, i.e. \p{N}.
    pre_tokenizer_step step(pre_tokenizer_step::kind::split_regex);
    step.re = compile(f, f.flag(o, "individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)", "pre_tokenizer Digits");
    steps.push_back(std::move(step));
  } else {
    f.fail("pre_tokenizer type '" + type + "' is not supported");
  }
}

} // namespace troupe::runtime::tokenizer_detail
