// Writing tools, calls and results into the conversation (see tool_prompt.hpp).
#include "runtime/tools/tool_prompt.hpp"

#include <boost/json.hpp>

#include "runtime/errors.hpp"
#include "runtime/trim.hpp"

namespace troupe::runtime::tools {

namespace {

std::string_view trim(std::string_view s) {
  return runtime::trim(s, json_space);
}

// Our own instructions (the markers are the formats'; the wording is ours).
std::string hermes_tools_paragraph(std::span<const tool_function> tools) {
  std::string out = "# Tools\n\nFunctions you may call, inside <tools></tools>:\n<tools>\n";
  for (const auto& t : tools)
    out += tool_json(t) + "\n";
  out += "</tools>\n\nTo call one, write:\n<tool_call>\n{\"name\": <function name>, \"arguments\": <JSON "
         "object>}\n</tool_call>";
  return out;
}

std::string llama3_tools_paragraph(std::span<const tool_function> tools) {
  std::string out = "Functions you may call are below. To call one, reply with only {\"name\": <function name>, "
                    "\"parameters\": <JSON object>}.\n\n";
  for (const auto& t : tools)
    out += tool_json(t) + "\n\n";
  return std::string(trim(out));
}

std::string mistral_tools_block(std::span<const tool_function> tools) {
  std::string out = "[AVAILABLE_TOOLS] [";
  for (std::size_t i = 0; i < tools.size(); ++i)
    out += (i ? ", " : "") + tool_json(tools[i]);
  return out + "][/AVAILABLE_TOOLS]";
}

// A tool message's content as a JSON value for mistral's {"content": ...}: JSON when it parses, else the string.
boost::json::value result_value(std::string_view content) {
  boost::system::error_code ec;
  auto v = boost::json::parse(content, ec);
  if (!ec)
    return v;
  return boost::json::string(content);
}

std::string assistant_with_calls(tool_syntax s, const chat_message& m) {
  std::string out(trim(m.content));
  switch (s) {
    case tool_syntax::hermes:
      for (const auto& c : m.tool_calls)
        out += (out.empty() ? "" : "\n") + std::string("<tool_call>\n") + call_json(s, c) + "\n</tool_call>";
      return out;
    case tool_syntax::llama3:
      if (m.tool_calls.size() > 1)
        throw invalid_argument_error("the llama3 chat format takes one tool call per assistant message, got " +
                                         std::to_string(m.tool_calls.size()),
                                     "messages");
      return out + (out.empty() ? "" : "\n") + call_json(s, m.tool_calls.front());
    case tool_syntax::mistral: {
      std::string list;
      for (const auto& c : m.tool_calls)
        list += (list.empty() ? "" : ", ") + call_json(s, c);
      return out + (out.empty() ? "" : " ") + "[TOOL_CALLS] [" + list + "]";
    }
  }
  return out;
}

} // namespace

std::string tool_json(const tool_function& f) {
  boost::system::error_code ec;
  auto parameters = boost::json::parse(f.parameters, ec);
  if (ec || !parameters.is_object())
    throw invalid_argument_error("tool \"" + f.name + "\": parameters must be a JSON object (a JSON Schema)", "tools");
  boost::json::object function{{"name", f.name}};
  if (!f.description.empty())
    function["description"] = f.description;
  function["parameters"] = std::move(parameters);
  return boost::json::serialize(boost::json::object{{"type", "function"}, {"function", std::move(function)}});
}

std::string call_json(tool_syntax s, const tool_call& c) {
  const std::string_view arguments = trim(c.arguments);
  return "{\"name\": " + boost::json::serialize(boost::json::string(c.name)) + ", \"" +
         (s == tool_syntax::llama3 ? "parameters" : "arguments") + "\": " +
         std::string(arguments.empty() ? "{}" : arguments) + "}";
}

folded_chat fold_tools(chat_format f, std::vector<chat_message> messages, std::span<const tool_function> tools) {
  const tool_syntax s = tool_syntax_for(f);
  folded_chat out;
  if (!tools.empty()) {
    if (s == tool_syntax::mistral) {
      out.mistral_tools = mistral_tools_block(tools);
    } else {
      const std::string paragraph = s == tool_syntax::hermes ? hermes_tools_paragraph(tools) : llama3_tools_paragraph(tools);
      if (!messages.empty() && messages.front().role == "system") {
        auto& system = messages.front().content;
        system = std::string(trim(system));
        system += (system.empty() ? "" : "\n\n") + paragraph;
      } else {
        messages.insert(messages.begin(), chat_message{"system", paragraph, {}, {}});
      }
    }
  }
  for (std::size_t i = 0; i < messages.size(); ++i) {
    auto& m = messages[i];
    if (m.role == "assistant" && !m.tool_calls.empty()) {
      out.messages.push_back({"assistant", assistant_with_calls(s, m), {}, {}});
      continue;
    }
    if (m.role != "tool") {
      out.messages.push_back(std::move(m));
      continue;
    }
    switch (s) {
      case tool_syntax::hermes: {
        // Consecutive results share one user turn.
        std::string block = "<tool_response>\n" + std::string(trim(m.content)) + "\n</tool_response>";
        if (i > 0 && messages[i - 1].role == "tool")
          out.messages.back().content += "\n" + block;
        else
          out.messages.push_back({"user", std::move(block), {}, {}});
        break;
      }
      case tool_syntax::llama3:
        out.messages.push_back({"tool", std::string(trim(m.content)), {}, {}});
        break;
      case tool_syntax::mistral: {
        boost::json::object result{{"content", result_value(trim(m.content))}};
        if (!m.tool_call_id.empty())
          result["call_id"] = m.tool_call_id;
        out.messages.push_back({"tool", "[TOOL_RESULTS] " + boost::json::serialize(result) + "[/TOOL_RESULTS]", {}, {}});
        break;
      }
    }
  }
  return out;
}

} // namespace troupe::runtime::tools
