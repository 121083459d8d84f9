// Checking a request's tools and deciding how they are used (see tool_request.hpp).
#include "runtime/tools/tool_request.hpp"

#include <set>
#include <string>

#include "runtime/errors.hpp"
#include "runtime/structured/tool_call_grammar.hpp"

namespace troupe::runtime::tools {

tool_plan plan_tools(chat_format f, bool is_chat, std::span<const tool_function> tools, const tool_choice& choice,
                     bool parallel, const output_constraint& other) {
  using mode = tool_choice::mode;
  tool_plan plan;
  if (tools.empty()) {
    if (choice.type == mode::required || choice.type == mode::function)
      throw invalid_argument_error("tool_choice \"" +
                                       std::string(choice.type == mode::required ? "required" : choice.function) +
                                       "\" needs tools",
                                   "tool_choice");
    return plan;
  }
  if (!is_chat)
    throw invalid_argument_error("tools are only taken with a chat (messages)", "tools");
  if (tools.size() > static_cast<std::size_t>(max_tools))
    throw invalid_argument_error("at most " + std::to_string(max_tools) + " tools, got " + std::to_string(tools.size()),
                                 "tools");
  std::set<std::string> names;
  for (const auto& t : tools) {
    if (!valid_tool_name(t.name))
      throw invalid_argument_error("tool name \"" + t.name + "\" must be 1 to " + std::to_string(max_tool_name_length) +
                                       " characters of a-z, A-Z, 0-9, _ and -",
                                   "tools");
    if (!names.insert(t.name).second)
      throw invalid_argument_error("tool name \"" + t.name + "\" is used twice", "tools");
  }
  if (choice.type == mode::none)
    return plan;
  plan.prompt_tools.assign(tools.begin(), tools.end());
  plan.parse_calls = true;
  if (choice.type == mode::automatic)
    return plan;
  if (!other.empty())
    throw invalid_argument_error(std::string("tool_choice ") +
                                     (choice.type == mode::required ? "required" : "naming a function") +
                                     " constrains the output to tool calls; it cannot be combined with a " +
                                     to_string(other.type) + " constraint",
                                 "tool_choice");
  std::vector<tool_function> callable;
  if (choice.type == mode::function) {
    for (const auto& t : tools)
      if (t.name == choice.function)
        callable.push_back(t);
    if (callable.empty())
      throw invalid_argument_error("tool_choice names function \"" + choice.function + "\", which is not among the tools",
                                   "tool_choice");
  } else {
    callable.assign(tools.begin(), tools.end());
  }
  const tool_syntax syntax = tool_syntax_for(f);
  // A named function is called once; required may call several with parallel_tool_calls.
  const bool several = parallel && choice.type == mode::required;
  plan.constraint.type = output_constraint::kind::tool_calls;
  plan.constraint.text = structured::tool_call_constraint_text(syntax, callable, several);
  return plan;
}

} // namespace troupe::runtime::tools
