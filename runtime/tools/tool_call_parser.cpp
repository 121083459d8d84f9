// Splitting streamed output into text and tool calls (see tool_call_parser.hpp).
#include "runtime/tools/tool_call_parser.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <optional>

#include "runtime/trim.hpp"

namespace troupe::runtime::tools {

namespace {

constexpr std::string_view hermes_open = "<tool_call>";
constexpr std::string_view hermes_close = "</tool_call>";
constexpr std::string_view python_tag = "<|python_tag|>";
constexpr std::string_view mistral_marker = "[TOOL_CALLS]";
constexpr std::string_view space = json_space;

std::string_view trim(std::string_view s) {
  return runtime::trim(s, space);
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// The end of the JSON value that starts at `pos` of text boost::json has already accepted:
// strings skipped with their escapes, brackets counted.
std::size_t skip_value(std::string_view text, std::size_t pos) {
  int depth = 0;
  for (; pos < text.size(); ++pos) {
    const char c = text[pos];
    if (c == '"') {
      for (++pos; pos < text.size() && text[pos] != '"'; ++pos)
        if (text[pos] == '\\')
          ++pos;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0)
        return pos + 1;
      if (depth < 0)
        return pos;
    } else if (depth == 0 && (c == ',' || space.find(c) != std::string_view::npos)) {
      return pos;
    }
    if (depth == 0 && c == '"')
      return pos + 1;
  }
  return pos;
}

std::size_t skip_space(std::string_view text, std::size_t pos) {
  while (pos < text.size() && space.find(text[pos]) != std::string_view::npos)
    ++pos;
  return pos;
}

// The raw text of the value of `key` in a JSON object's text (already accepted by boost::json):
// arguments are passed on as the model wrote them, numbers and all (a number too large for a
// double would not survive a round trip).
std::optional<std::string_view> raw_member(std::string_view object, std::string_view key) {
  std::size_t pos = skip_space(object, 0) + 1; // past '{'
  while (true) {
    pos = skip_space(object, pos);
    if (pos >= object.size() || object[pos] != '"')
      return std::nullopt;
    const std::size_t key_end = skip_value(object, pos);
    const std::string_view name = object.substr(pos + 1, key_end - pos - 2);
    pos = skip_space(object, key_end) + 1; // past ':'
    pos = skip_space(object, pos);
    const std::size_t value_end = skip_value(object, pos);
    if (name == key)
      return object.substr(pos, value_end - pos);
    pos = skip_space(object, value_end);
    if (pos >= object.size() || object[pos] != ',')
      return std::nullopt;
    ++pos;
  }
}

// The raw texts of a JSON array's elements.
std::vector<std::string_view> raw_elements(std::string_view array) {
  std::vector<std::string_view> out;
  std::size_t pos = skip_space(array, 0) + 1; // past '['
  while (true) {
    pos = skip_space(array, pos);
    if (pos >= array.size() || array[pos] == ']')
      return out;
    const std::size_t end = skip_value(array, pos);
    out.push_back(array.substr(pos, end - pos));
    pos = skip_space(array, end);
    if (pos < array.size() && array[pos] == ',')
      ++pos;
  }
}

// A JSON value with its text as written.
struct json_text {
  boost::json::value value;
  std::string_view text;
};

// The JSON values in `body`, one after another, separated by whitespace or ';' (Llama
// writes several calls that way); nullopt when any of it is not JSON.
std::optional<std::vector<json_text>> json_values(std::string_view body) {
  std::vector<json_text> values;
  std::size_t pos = 0;
  while (true) {
    while (pos < body.size() && (space.find(body[pos]) != std::string_view::npos || body[pos] == ';'))
      ++pos;
    if (pos == body.size())
      return values;
    boost::json::parser p;
    boost::system::error_code ec;
    const auto used = p.write_some(body.data() + pos, body.size() - pos, ec);
    if (ec)
      return std::nullopt;
    values.push_back({p.release(), body.substr(pos, used)});
    pos += used;
  }
}

// {"name": "f", "arguments" | "parameters": {...} or its JSON text}.
std::optional<tool_call> call_of(const json_text& v) {
  if (!v.value.is_object())
    return std::nullopt;
  const auto& o = v.value.get_object();
  const auto* name = o.if_contains("name");
  if (name == nullptr || !name->is_string() || name->get_string().empty())
    return std::nullopt;
  const char* key = o.contains("arguments") ? "arguments" : "parameters";
  const auto* arguments = o.if_contains(key);
  tool_call call{{}, std::string(name->get_string()), "{}"};
  if (arguments == nullptr)
    return call;
  if (arguments->is_string()) {
    // Some models write the arguments as a string of JSON.
    boost::system::error_code ec;
    auto inner = boost::json::parse(arguments->get_string(), ec);
    if (ec || !inner.is_object())
      return std::nullopt;
    call.arguments = std::string(trim(arguments->get_string()));
  } else if (arguments->is_object()) {
    const auto raw = raw_member(v.text, key);
    if (!raw)
      return std::nullopt;
    call.arguments = std::string(*raw);
  } else {
    return std::nullopt;
  }
  return call;
}

} // namespace

bool tool_call_parser::parse_calls(std::string_view body, parsed_output& out) {
  auto values = json_values(trim(body));
  if (!values || values->empty())
    return false;
  // mistral: one list of calls.
  if (syntax_ == tool_syntax::mistral && values->size() == 1 && values->front().value.is_array()) {
    const auto& list = values->front().value.get_array();
    const auto texts = raw_elements(values->front().text);
    if (list.empty() || texts.size() != list.size())
      return false;
    std::vector<json_text> elements;
    for (std::size_t i = 0; i < list.size(); ++i)
      elements.push_back({list[i], texts[i]});
    *values = std::move(elements);
  }
  if (syntax_ == tool_syntax::hermes && values->size() != 1)
    return false;
  std::vector<tool_call> calls;
  for (const auto& v : *values) {
    auto call = call_of(v);
    if (!call)
      return false;
    calls.push_back(std::move(*call));
  }
  for (auto& c : calls)
    out.calls.push_back(std::move(c));
  calls_made_ += static_cast<int>(calls.size());
  held_space_.clear(); // whitespace before a call is not text
  return true;
}

void tool_call_parser::emit(parsed_output& out, std::string_view text) {
  const auto last = text.find_last_not_of(space);
  if (last == std::string_view::npos) {
    held_space_ += text;
    return;
  }
  out.text += held_space_;
  out.text += text.substr(0, last + 1);
  held_space_ = std::string(text.substr(last + 1));
}

void tool_call_parser::release_text(parsed_output& out, std::string_view marker) {
  // The longest tail of pending_ that could begin the marker waits for more bytes.
  std::size_t keep = 0;
  for (std::size_t n = std::min(marker.size() - 1, pending_.size()); n > 0; --n)
    if (std::string_view(pending_).substr(pending_.size() - n) == marker.substr(0, n)) {
      keep = n;
      break;
    }
  emit(out, std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
}

void tool_call_parser::scan_hermes(parsed_output& out) {
  while (true) {
    if (!in_call_) {
      const auto open = pending_.find(hermes_open);
      if (open == std::string::npos) {
        release_text(out, hermes_open);
        return;
      }
      emit(out, std::string_view(pending_).substr(0, open)); // all of it: the marker is found
      pending_.erase(0, open + hermes_open.size());
      in_call_ = true;
      continue;
    }
    const auto close = pending_.find(hermes_close);
    if (close == std::string::npos)
      return;
    const std::string body = pending_.substr(0, close);
    pending_.erase(0, close + hermes_close.size());
    in_call_ = false;
    if (!parse_calls(body, out)) // not a call after all: the block is text, as written
      emit(out, std::string(hermes_open) + body + std::string(hermes_close));
  }
}

void tool_call_parser::scan_trailing(parsed_output& out) {
  if (!decided_) {
    const auto first = pending_.find_first_not_of(space);
    if (first == std::string::npos)
      return;
    const std::string_view rest = std::string_view(pending_).substr(first);
    if (syntax_ == tool_syntax::llama3) {
      // "<|py" could still become the tag.
      if (rest.size() < python_tag.size() && starts_with(python_tag, rest))
        return;
      in_call_ = rest.front() == '{' || starts_with(rest, python_tag);
    } else {
      in_call_ = rest.front() == '[';
    }
    decided_ = true;
  }
  if (in_call_)
    return; // held to the end
  if (syntax_ == tool_syntax::mistral) {
    const auto marker = pending_.find(mistral_marker);
    if (marker == std::string::npos) {
      release_text(out, mistral_marker);
      return;
    }
    emit(out, std::string_view(pending_).substr(0, marker)); // all of it: the marker is found
    pending_.erase(0, marker);
    in_call_ = true;
    return;
  }
  emit(out, pending_); // llama3: calls only come first; text streams
  pending_.clear();
}

parsed_output tool_call_parser::push(std::string_view piece) {
  parsed_output out;
  pending_ += piece;
  if (syntax_ == tool_syntax::hermes)
    scan_hermes(out);
  else
    scan_trailing(out);
  return out;
}

parsed_output tool_call_parser::flush() {
  parsed_output out;
  if (in_call_) {
    std::string_view body = trim(pending_);
    bool parsed = false;
    if (syntax_ == tool_syntax::hermes) {
      parsed = parse_calls(body, out); // a block the output ended inside
      if (!parsed)
        pending_.insert(0, hermes_open);
    } else {
      if (starts_with(body, python_tag))
        body.remove_prefix(python_tag.size());
      else if (starts_with(body, mistral_marker))
        body.remove_prefix(mistral_marker.size());
      parsed = parse_calls(body, out);
    }
    if (parsed)
      pending_.clear();
    in_call_ = false;
  }
  emit(out, pending_);
  pending_.clear();
  // Trailing whitespace is text unless calls were made (then it only separated them).
  if (calls_made_ == 0)
    out.text += held_space_;
  held_space_.clear();
  return out;
}

} // namespace troupe::runtime::tools
