// Reads and writes the tool-calling fields (see tool_fields.hpp).
#include "net/tool_fields.hpp"

#include <boost/json.hpp>

#include "net/json_fields.hpp"

namespace troupe::net {

namespace {

const boost::json::object& object_at(const boost::json::value& v, const std::string& param) {
  require(v.is_object(), "'" + param + "' must be an object", param);
  return v.get_object();
}

std::string tool_name(const boost::json::object& function, const std::string& param) {
  const auto* name = find_field(function, "name");
  require(name != nullptr, "'" + param + ".name' is required", param + ".name");
  std::string n(to_string(*name, param + ".name"));
  require(valid_tool_name(n),
          "'" + param + ".name' must be 1 to " + std::to_string(max_tool_name_length) +
              " characters of a-z, A-Z, 0-9, _ and -, got \"" + n + "\"",
          param + ".name");
  return n;
}

void require_function_type(const boost::json::object& o, const std::string& param) {
  const auto* type = find_field(o, "type");
  require(type != nullptr, "'" + param + ".type' is required (\"function\")", param + ".type");
  require(to_string(*type, param + ".type") == "function",
          "'" + param + ".type' must be \"function\": other tool types are not supported", param + ".type");
}

tool_function read_tool(const boost::json::value& v, const std::string& param) {
  const auto& o = object_at(v, param);
  require_function_type(o, param);
  const auto* function = find_field(o, "function");
  require(function != nullptr, "'" + param + ".function' is required", param + ".function");
  const auto& f = object_at(*function, param + ".function");
  tool_function out;
  out.name = tool_name(f, param + ".function");
  if (const auto* description = find_field(f, "description"))
    out.description = std::string(to_string(*description, param + ".function.description"));
  if (const auto* parameters = find_field(f, "parameters")) {
    require(parameters->is_object(), "'" + param + ".function.parameters' must be a JSON Schema object",
            param + ".function.parameters");
    out.parameters = boost::json::serialize(*parameters);
  }
  if (const auto* strict = find_field(f, "strict"))
    to_bool(*strict, param + ".function.strict"); // accepted: with tool_choice required the arguments always follow
  return out;
}

tool_choice read_choice(const boost::json::value& v) {
  if (v.is_string()) {
    const auto s = v.get_string();
    if (s == "none")
      return {tool_choice::mode::none, {}};
    if (s == "auto")
      return {tool_choice::mode::automatic, {}};
    if (s == "required")
      return {tool_choice::mode::required, {}};
    reject("'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": "
           "{\"name\": ...}}, got \"" + std::string(s) + "\"",
           "tool_choice");
  }
  const auto& o = object_at(v, "tool_choice");
  require_function_type(o, "tool_choice");
  const auto* function = find_field(o, "function");
  require(function != nullptr, "'tool_choice.function' is required", "tool_choice.function");
  return {tool_choice::mode::function, tool_name(object_at(*function, "tool_choice.function"), "tool_choice.function")};
}

} // namespace

void read_tool_fields(const boost::json::object& body, request_spec& spec) {
  if (const auto* tools = find_field(body, "tools")) {
    require(tools->is_array(), "'tools' must be an array", "tools");
    const auto& list = tools->get_array();
    require(list.size() <= static_cast<std::size_t>(max_tools),
            "'tools' may list at most " + std::to_string(max_tools) + " functions, got " + std::to_string(list.size()),
            "tools");
    for (std::size_t i = 0; i < list.size(); ++i)
      spec.tools.push_back(read_tool(list[i], "tools.[" + std::to_string(i) + "]"));
  }
  if (const auto* choice = find_field(body, "tool_choice"))
    spec.choice_of_tool = read_choice(*choice);
  if (auto parallel = read_bool(body, "parallel_tool_calls"))
    spec.parallel_tool_calls = *parallel;
}

std::vector<tool_call> read_tool_calls(const boost::json::value& calls, const std::string& param) {
  const std::string name = param + ".tool_calls";
  require(calls.is_array(), "'" + name + "' must be an array", name);
  std::vector<tool_call> out;
  for (std::size_t i = 0; i < calls.get_array().size(); ++i) {
    const std::string p = name + ".[" + std::to_string(i) + "]";
    const auto& o = object_at(calls.get_array()[i], p);
    require_function_type(o, p);
    tool_call c;
    if (const auto* id = find_field(o, "id"))
      c.id = std::string(to_string(*id, p + ".id"));
    const auto* function = find_field(o, "function");
    require(function != nullptr, "'" + p + ".function' is required", p + ".function");
    const auto& f = object_at(*function, p + ".function");
    c.name = tool_name(f, p + ".function");
    const auto* arguments = find_field(f, "arguments");
    require(arguments != nullptr, "'" + p + ".function.arguments' is required (JSON text)", p + ".function.arguments");
    c.arguments = std::string(to_string(*arguments, p + ".function.arguments"));
    boost::system::error_code ec;
    auto parsed = boost::json::parse(c.arguments, ec);
    require(!ec && parsed.is_object(), "'" + p + ".function.arguments' must be a JSON object, as text",
            p + ".function.arguments");
    out.push_back(std::move(c));
  }
  return out;
}

boost::json::object tool_call_json(const tool_call& call, int index) {
  boost::json::object out;
  if (index >= 0)
    out["index"] = index;
  out["id"] = call.id;
  out["type"] = "function";
  out["function"] = boost::json::object{{"name", call.name}, {"arguments", call.arguments}};
  return out;
}

} // namespace troupe::net
