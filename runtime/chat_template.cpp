// Chat format detection from template markers, and the C++ renderers for each format
// (see runtime/chat_template.hpp for the exact text each one produces).
#include "runtime/chat_template.hpp"

#include "runtime/errors.hpp"
#include "runtime/tools/tool_prompt.hpp"
#include "runtime/trim.hpp"

#include <vector>

namespace troupe::runtime {

namespace {

bool contains(std::string_view text, std::string_view what) {
  return text.find(what) != std::string_view::npos;
}

// Messages are trimmed with runtime::trim: Jinja's trim / Python's str.strip(), limited to ASCII
// whitespace (the non-ASCII spaces Python would also strip do not occur around chat messages).

enum class role { system, user, assistant, tool };

role parse_role(const chat_message& m, std::size_t index) {
  if (m.role == "system")
    return role::system;
  if (m.role == "user")
    return role::user;
  if (m.role == "assistant")
    return role::assistant;
  if (m.role == "tool")
    return role::tool;
  throw invalid_argument_error("chat message " + std::to_string(index + 1) + " has unknown role \"" + m.role +
                               "\" (expected system, user, assistant or tool)");
}

const char* role_name(role r) {
  switch (r) {
    case role::system:
      return "system";
    case role::user:
      return "user";
    case role::assistant:
      return "assistant";
    case role::tool:
      return "tool";
  }
  return "?";
}

// The messages as the renderers see them: roles checked, the default system message put
// in front where it applies.
struct conversation {
  std::vector<role> roles;
  std::vector<std::string_view> contents;

  std::size_t size() const { return roles.size(); }
};

conversation prepare(std::span<const chat_message> messages, std::string_view default_system) {
  if (messages.empty())
    throw invalid_argument_error("chat needs at least one message");
  conversation c;
  c.roles.reserve(messages.size() + 1);
  c.contents.reserve(messages.size() + 1);
  // Roles are checked before the default is added so error positions match the caller's list.
  std::vector<role> given;
  for (std::size_t i = 0; i < messages.size(); ++i)
    given.push_back(parse_role(messages[i], i));
  if (!default_system.empty() && given.front() != role::system) {
    c.roles.push_back(role::system);
    c.contents.push_back(default_system);
  }
  for (std::size_t i = 0; i < messages.size(); ++i) {
    c.roles.push_back(given[i]);
    c.contents.push_back(messages[i].content);
  }
  return c;
}

// llama2, mistral and gemma: [system] user assistant user ... user (gemma may also end with
// assistant). Returns the index of the first user message.
std::size_t check_alternation(const conversation& c, std::span<const chat_message> messages, chat_format f) {
  const std::string name = "chat (" + std::string(to_string(f)) + "): ";
  // A default system message put in front shifts positions by one; errors use the caller's.
  const std::size_t offset = c.size() - messages.size();
  const std::size_t first = c.roles.front() == role::system ? 1 : 0;
  if (first == c.size())
    throw invalid_argument_error(name + "needs a user message after the system message");
  // Mistral's tool results follow the assistant's calls (or each other) and stand in for the next user turn.
  const bool results = f == chat_format::mistral;
  // Gemma's template checks only the alternation: after an assistant turn it opens another model turn.
  const bool open_end = f == chat_format::gemma;
  role previous = role::assistant;
  for (std::size_t i = first; i < c.size(); ++i) {
    const role r = c.roles[i];
    const bool ok = r == role::user ? previous != role::user
                    : r == role::assistant ? previous == role::user || (results && previous == role::tool)
                    : r == role::tool ? results && (previous == role::assistant || previous == role::tool)
                                      : false;
    if (!ok)
      throw invalid_argument_error(name + "message " + std::to_string(i - offset + 1) + " is \"" +
                                   messages[i - offset].role + "\" where \"" +
                                   (previous == role::user ? "assistant" : "user") +
                                   "\" was expected: after an optional first system message, user and assistant "
                                   "must alternate, starting with user" +
                                   (results ? " (tool results may follow an assistant's calls)" : ""));
    previous = r;
  }
  if (!open_end && previous != role::user && !(results && previous == role::tool))
    throw invalid_argument_error(name + "the last message must be from the user; this format has no way to "
                                        "ask for a reply after an assistant message");
  return first;
}

std::string render_plain(const conversation& c) {
  std::string out;
  for (std::size_t i = 0; i < c.size(); ++i) {
    out += c.roles[i] == role::system ? "System: " : c.roles[i] == role::user ? "User: " : "Assistant: ";
    out += c.contents[i];
    out += '\n';
  }
  out += "Assistant:";
  return out;
}

std::string render_llama2(const conversation& c, std::span<const chat_message> messages) {
  const std::size_t first = check_alternation(c, messages, chat_format::llama2);
  std::string out;
  for (std::size_t i = first; i < c.size(); ++i) {
    if (c.roles[i] == role::user) {
      std::string content;
      if (i == first && first == 1) {
        content = "<<SYS>>\n";
        content += c.contents[0];
        content += "\n<</SYS>>\n\n";
      }
      content += c.contents[i];
      out += "<s>[INST] ";
      out += trim(content);
      out += " [/INST]";
    } else {
      out += ' ';
      out += trim(c.contents[i]);
      out += " </s>";
    }
  }
  return out;
}

std::string render_llama3(const conversation& c) {
  std::string out = "<|begin_of_text|>";
  for (std::size_t i = 0; i < c.size(); ++i) {
    out += "<|start_header_id|>";
    // Llama-3.1's role for tool results.
    out += c.roles[i] == role::tool ? "ipython" : role_name(c.roles[i]);
    out += "<|end_header_id|>\n\n";
    out += trim(c.contents[i]);
    out += "<|eot_id|>";
  }
  out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::string render_chatml(const conversation& c, const chat_options& options) {
  std::string out;
  for (std::size_t i = 0; i < c.size(); ++i) {
    out += "<|im_start|>";
    out += role_name(c.roles[i]);
    out += '\n';
    out += c.contents[i];
    out += "<|im_end|>\n";
  }
  out += "<|im_start|>assistant\n";
  // Qwen3's thinking switch turned off: the think block is written, empty and closed, for the model.
  if (!options.enable_thinking)
    out += "<think>\n\n</think>\n\n";
  return out;
}

std::string render_phi3(const conversation& c) {
  std::string out;
  for (std::size_t i = 0; i < c.size(); ++i) {
    out += "<|";
    out += role_name(c.roles[i]); // no tool role: the hermes syntax made tool results user turns
    out += "|>\n";
    out += c.contents[i];
    out += "<|end|>\n";
  }
  out += "<|assistant|>\n";
  return out;
}

// Gemma 3's template, whitespace for whitespace: only the system text is written untrimmed.
std::string render_gemma(const conversation& c, std::span<const chat_message> messages) {
  const std::size_t first = check_alternation(c, messages, chat_format::gemma);
  std::string out = "<bos>";
  for (std::size_t i = first; i < c.size(); ++i) {
    out += "<start_of_turn>";
    out += c.roles[i] == role::user ? "user" : "model";
    out += '\n';
    if (i == first && first == 1) {
      out += c.contents[0];
      out += "\n\n";
    }
    out += trim(c.contents[i]);
    out += "<end_of_turn>\n";
  }
  out += "<start_of_turn>model\n";
  return out;
}

std::string render_mistral(const conversation& c, std::span<const chat_message> messages,
                           std::string_view available_tools) {
  const std::size_t first = check_alternation(c, messages, chat_format::mistral);
  std::size_t last_user = first;
  for (std::size_t i = first; i < c.size(); ++i)
    if (c.roles[i] == role::user)
      last_user = i;
  std::string out = "<s>";
  for (std::size_t i = first; i < c.size(); ++i) {
    if (c.roles[i] == role::tool) {
      out += c.contents[i]; // already "[TOOL_RESULTS] ...[/TOOL_RESULTS]"
    } else if (c.roles[i] == role::user) {
      if (i == last_user)
        out += available_tools;
      out += "[INST] ";
      if (i == first && first == 1) {
        out += c.contents[0];
        out += "\n\n";
      }
      out += c.contents[i];
      out += " [/INST]";
    } else {
      out += ' ';
      out += c.contents[i];
      out += "</s>";
    }
  }
  return out;
}

} // namespace

std::string_view to_string(chat_format f) {
  switch (f) {
  case chat_format::plain:
    return "plain";
  case chat_format::llama2:
    return "llama2";
  case chat_format::llama3:
    return "llama3";
  case chat_format::chatml:
    return "chatml";
  case chat_format::mistral:
    return "mistral";
  case chat_format::phi3:
    return "phi3";
  case chat_format::gemma:
    return "gemma";
  }
  return "unknown";
}

chat_format detect_chat_format(std::string_view t) {
  if (contains(t, "<|start_header_id|>") && (contains(t, "<|end_header_id|>") || contains(t, "<|eot_id|>")))
    return chat_format::llama3;
  if (contains(t, "<|im_start|>"))
    return chat_format::chatml;
  if (contains(t, "[INST]"))
    return contains(t, "<<SYS>>") ? chat_format::llama2 : chat_format::mistral;
  if (contains(t, "<|user|>") && contains(t, "<|end|>") && contains(t, "<|assistant|>"))
    return chat_format::phi3;
  if (contains(t, "<start_of_turn>") && contains(t, "<end_of_turn>"))
    return chat_format::gemma;
  return chat_format::plain;
}

std::string default_system_message(std::string_view t) {
  constexpr std::string_view start = "<|im_start|>system";
  constexpr std::string_view end = "<|im_end|>";
  for (auto pos = t.find(start); pos != std::string_view::npos; pos = t.find(start, pos + 1)) {
    // Must open a string literal, or it is not one whole literal turn.
    if (pos == 0 || (t[pos - 1] != '\'' && t[pos - 1] != '"'))
      continue;
    auto text_begin = pos + start.size();
    // The newline after the role: the Jinja escape \n, or a real newline.
    if (t.substr(text_begin, 2) == "\\n")
      text_begin += 2;
    else if (text_begin < t.size() && t[text_begin] == '\n')
      text_begin += 1;
    else
      continue;
    const auto text_end = t.find(end, text_begin);
    if (text_end == std::string_view::npos)
      continue;
    const std::string_view text = t.substr(text_begin, text_end - text_begin);
    // Quotes, braces, backslashes or '+' mean the literal ends or an expression joins it.
    if (text.empty() || text.find_first_of("'\"{}\\+") != std::string_view::npos)
      continue;
    return std::string(text);
  }
  return {};
}

bool has_thinking_switch(std::string_view t) {
  return detect_chat_format(t) == chat_format::chatml && contains(t, "enable_thinking");
}

std::string render_chat(chat_format f, std::span<const chat_message> given, std::string_view default_system,
                        std::span<const tool_function> tools, chat_options options) {
  for (std::size_t i = 0; i < given.size(); ++i)
    parse_role(given[i], i); // unknown roles are named at the caller's positions
  std::vector<chat_message> all(given.begin(), given.end());
  // The tools join the system message, the default one included (as Qwen2.5's template writes them).
  if (!tools.empty() && !default_system.empty() && !all.empty() && all.front().role != "system")
    all.insert(all.begin(), chat_message{"system", std::string(default_system), {}, {}});
  const auto folded = tools::fold_tools(f, std::move(all), tools);
  const std::span<const chat_message> messages = folded.messages;
  const conversation c = prepare(messages, default_system);
  switch (f) {
  case chat_format::plain:
    return render_plain(c);
  case chat_format::llama2:
    return render_llama2(c, messages);
  case chat_format::llama3:
    return render_llama3(c);
  case chat_format::chatml:
    return render_chatml(c, options);
  case chat_format::mistral:
    return render_mistral(c, messages, folded.mistral_tools);
  case chat_format::phi3:
    return render_phi3(c);
  case chat_format::gemma:
    return render_gemma(c, messages);
  }
  throw invalid_argument_error("chat format " + std::to_string(static_cast<int>(f)) + " is not known");
}

bool rendered_includes_bos(chat_format f) {
  switch (f) {
  case chat_format::llama2:
  case chat_format::llama3:
  case chat_format::mistral:
  case chat_format::gemma:
    return true;
  case chat_format::plain:
  case chat_format::chatml:
  case chat_format::phi3:
    return false;
  }
  return false;
}

} // namespace troupe::runtime
