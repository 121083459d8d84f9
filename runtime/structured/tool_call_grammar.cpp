// Tool-call grammars (see tool_call_grammar.hpp).
#include "runtime/structured/tool_call_grammar.hpp"

#include <boost/json.hpp>

#include <vector>

#include "runtime/errors.hpp"
#include "runtime/structured/json_schema_grammar.hpp"

namespace troupe::runtime::structured {

namespace {

using tools::tool_syntax;

// Copies `from`'s rules into `into`; returns the id its root has there.
int embed(grammar& into, const grammar& from) {
  std::vector<int> ids;
  ids.reserve(from.rules().size());
  for (const auto& r : from.rules())
    ids.push_back(into.add_rule(r.name));
  for (std::size_t r = 0; r < from.rules().size(); ++r)
    for (auto alternative : from.rules()[r].alternatives) {
      for (auto& e : alternative)
        if (e.what == element::kind::rule)
          e.rule = ids.at(static_cast<std::size_t>(e.rule));
      into.add_alternative(ids[r], std::move(alternative));
    }
  return ids.at(static_cast<std::size_t>(from.root()));
}

// The arguments' grammar of one tool, its errors named with the tool.
grammar arguments_grammar(const tool_function& f) {
  boost::system::error_code ec;
  auto schema = boost::json::parse(f.parameters, ec);
  if (ec)
    throw invalid_argument_error("tool \"" + f.name + "\": parameters are not valid JSON: " + ec.message(), "tools");
  try {
    return json_schema_grammar(schema);
  } catch (const invalid_argument_error& e) {
    throw invalid_argument_error("tool \"" + f.name + "\": " + e.what(), "tools");
  }
}

} // namespace

grammar tool_call_grammar(tool_syntax syntax, std::span<const tool_function> tools, bool parallel) {
  if (tools.empty())
    throw invalid_argument_error("tool calls need at least one tool", "tools");
  grammar g;
  std::vector<sequence> calls;
  const std::string key = syntax == tool_syntax::llama3 ? "parameters" : "arguments";
  for (const auto& f : tools) {
    const int arguments = embed(g, arguments_grammar(f));
    // As tools::call_json writes a call.
    auto call = grammar::literal("{\"name\": " + boost::json::serialize(boost::json::string(f.name)) + ", \"" + key +
                                 "\": ");
    call.push_back(element::ref(arguments));
    call.push_back(element::byte('}'));
    calls.push_back(std::move(call));
  }
  const int call = g.add_rule("call", std::move(calls));
  sequence root;
  switch (syntax) {
    case tool_syntax::hermes: {
      auto block = grammar::literal("<tool_call>\n");
      block.push_back(element::ref(call));
      for (auto e : grammar::literal("\n</tool_call>"))
        block.push_back(e);
      const int one = g.add_rule("tool_call_block", {block});
      root = {element::ref(one)};
      if (parallel) {
        auto more = grammar::literal("\n");
        more.push_back(element::ref(one));
        root.push_back(g.star("more_tool_calls", std::move(more)));
      }
      break;
    }
    case tool_syntax::llama3:
      root = {element::ref(call)};
      break;
    case tool_syntax::mistral: {
      root = grammar::literal("[");
      root.push_back(element::ref(call));
      if (parallel) {
        auto more = grammar::literal(", ");
        more.push_back(element::ref(call));
        root.push_back(g.star("more_tool_calls", std::move(more)));
      }
      root.push_back(element::byte(']'));
      break;
    }
  }
  g.set_root(g.add_rule("tool_calls", {std::move(root)}));
  g.validate();
  return g;
}

std::string tool_call_constraint_text(tool_syntax syntax, std::span<const tool_function> tools, bool parallel) {
  boost::json::array list;
  for (const auto& f : tools)
    list.push_back(boost::json::object{{"name", f.name}, {"parameters", f.parameters}});
  return boost::json::serialize(
      boost::json::object{{"syntax", tools::to_string(syntax)}, {"parallel", parallel}, {"tools", std::move(list)}});
}

grammar tool_call_grammar_from_text(const std::string& text) {
  boost::system::error_code ec;
  auto v = boost::json::parse(text, ec);
  if (ec || !v.is_object())
    throw invalid_argument_error("the tool-call constraint is not a JSON object", "tools");
  const auto& o = v.get_object();
  const auto* syntax = o.if_contains("syntax");
  const auto* parallel = o.if_contains("parallel");
  const auto* list = o.if_contains("tools");
  if (syntax == nullptr || !syntax->is_string() || parallel == nullptr || !parallel->is_bool() || list == nullptr ||
      !list->is_array())
    throw invalid_argument_error("the tool-call constraint needs syntax, parallel and tools", "tools");
  std::vector<tool_function> tools;
  for (const auto& t : list->get_array()) {
    const auto* name = t.is_object() ? t.get_object().if_contains("name") : nullptr;
    const auto* parameters = t.is_object() ? t.get_object().if_contains("parameters") : nullptr;
    if (name == nullptr || !name->is_string() || parameters == nullptr || !parameters->is_string())
      throw invalid_argument_error("each tool of a tool-call constraint needs a name and parameters", "tools");
    tools.push_back({std::string(name->get_string()), {}, std::string(parameters->get_string())});
  }
  return tool_call_grammar(tools::parse_tool_syntax(syntax->get_string()), tools, parallel->get_bool());
}

} // namespace troupe::runtime::structured
