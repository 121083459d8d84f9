// Prompt and chat-message readers; ids and roles are checked here so that the
// engine only ever sees well-formed input.
#include "net/prompt_fields.hpp"

#include <limits>

#include "net/json_fields.hpp"
#include "net/tool_fields.hpp"

namespace troupe::net {

namespace {
bool is_integer(const boost::json::value& v) { return v.is_int64() || v.is_uint64(); }

// An array whose first element is a number is a prompt of token ids.
bool looks_like_ids(const boost::json::array& a) { return !a.empty() && a.front().is_number(); }

std::string content_text(const boost::json::value& content, const std::string& param) {
  if (content.is_string())
    return std::string(content.get_string());
  if (!content.is_array())
    reject("'" + param + "' must be a string or an array of text parts", param);
  const auto& parts = content.get_array();
  require(!parts.empty(), "'" + param + "' must not be an empty array", param);
  std::string text;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    auto part_param = param + ".[" + std::to_string(i) + "]";
    if (!parts[i].is_object())
      reject("'" + part_param + "' must be an object", part_param);
    const auto& part = parts[i].get_object();
    auto* type = part.if_contains("type");
    if (!type || !type->is_string() || type->get_string() != "text")
      reject("'" + part_param + ".type' must be \"text\": only text content is supported", part_param + ".type");
    auto* part_text = part.if_contains("text");
    if (!part_text)
      reject("'" + part_param + ".text' is required", part_param + ".text");
    if (i > 0)
      text += '\n';
    text += to_string(*part_text, part_param + ".text");
  }
  return text;
}
} // namespace

std::vector<token_id> read_token_ids(const boost::json::value& ids, std::string_view param,
                                     const request_limits& limits) {
  std::string name(param);
  if (!ids.is_array())
    reject("'" + name + "' must be an array of token ids", name);
  const auto& a = ids.get_array();
  require(!a.empty(), "'" + name + "' must not be empty", name);
  if (a.size() > static_cast<std::size_t>(limits.max_prompt_tokens))
    throw request_rejected(api_error{400, "invalid_request_error",
                                     "the prompt has " + std::to_string(a.size()) + " tokens, more than the " +
                                         std::to_string(limits.max_prompt_tokens) + " allowed",
                                     name, "context_length_exceeded"});
  std::vector<token_id> out;
  out.reserve(a.size());
  for (const auto& id : a) {
    if (!is_integer(id))
      reject("'" + name + "' must contain only integer token ids", name);
    auto x = to_int(id, name);
    require(x >= 0 && x <= std::numeric_limits<token_id>::max(),
            "'" + name + "' has an invalid token id " + std::to_string(x), name);
    out.push_back(static_cast<token_id>(x));
  }
  return out;
}

void read_prompt(const boost::json::value& prompt, const request_limits& limits, request_spec& spec) {
  if (prompt.is_string()) {
    spec.prompt = std::string(prompt.get_string());
    return;
  }
  if (!prompt.is_array())
    reject("'prompt' must be a string, an array of token ids, or a one-element array of either", "prompt");
  const auto& a = prompt.get_array();
  require(!a.empty(), "'prompt' must not be empty", "prompt");
  if (looks_like_ids(a)) {
    spec.prompt_ids = read_token_ids(prompt, "prompt", limits);
    return;
  }
  require(a.size() == 1, "batches of prompts are not supported: send one prompt per request", "prompt");
  const auto& only = a.front();
  if (only.is_string())
    spec.prompt = std::string(only.get_string());
  else if (only.is_array())
    spec.prompt_ids = read_token_ids(only, "prompt", limits);
  else
    reject("'prompt' must be a string, an array of token ids, or a one-element array of either", "prompt");
}

chat_messages read_messages(const boost::json::value& messages) {
  if (!messages.is_array())
    reject("'messages' must be an array", "messages");
  const auto& a = messages.get_array();
  require(!a.empty(), "'messages' must not be empty", "messages");
  chat_messages out;
  out.reserve(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto param = "messages.[" + std::to_string(i) + "]";
    if (!a[i].is_object())
      reject("'" + param + "' must be an object", param);
    const auto& m = a[i].get_object();
    auto* role = m.if_contains("role");
    if (!role)
      reject("'" + param + ".role' is required", param + ".role");
    auto r = to_string(*role, param + ".role");
    if (r != "system" && r != "user" && r != "assistant" && r != "tool")
      reject("'" + param + ".role' must be one of system, user, assistant, tool, got '" + std::string(r) + "'",
             param + ".role");
    chat_turn turn;
    turn.role = std::string(r);
    if (auto* calls = m.if_contains("tool_calls"); calls && !calls->is_null()) {
      require(r == "assistant", "'" + param + ".tool_calls' is only allowed on assistant messages",
              param + ".tool_calls");
      turn.tool_calls = read_tool_calls(*calls, param);
    }
    if (r == "tool") {
      auto* id = m.if_contains("tool_call_id");
      require(id != nullptr, "'" + param + ".tool_call_id' is required on tool messages", param + ".tool_call_id");
      turn.tool_call_id = std::string(to_string(*id, param + ".tool_call_id"));
    }
    auto* content = m.if_contains("content");
    if (!content || content->is_null()) {
      // An assistant's message may be its calls alone.
      require(!turn.tool_calls.empty(), "'" + param + ".content' is required", param + ".content");
    } else {
      turn.content = content_text(*content, param + ".content");
    }
    out.push_back(std::move(turn));
  }
  return out;
}

void read_chat_template_kwargs(const boost::json::object& body, request_spec& spec) {
  const auto* kwargs = find_field(body, "chat_template_kwargs");
  if (!kwargs)
    return;
  require(kwargs->is_object(), "'chat_template_kwargs' must be an object", "chat_template_kwargs");
  for (const auto& [key, value] : kwargs->get_object()) {
    const std::string param = "chat_template_kwargs." + std::string(key);
    require(key == "enable_thinking",
            "'" + param +
                "' is not supported: the chat template is rendered without Jinja, and enable_thinking is "
                "the only option it takes",
            param);
    if (!value.is_null())
      spec.enable_thinking = to_bool(value, param);
  }
}

} // namespace troupe::net
