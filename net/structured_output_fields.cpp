// Reads the structured-output fields (see structured_output_fields.hpp).
#include "net/structured_output_fields.hpp"

#include <string>
#include <vector>

#include "net/json_fields.hpp"

namespace troupe::net {

namespace {

using kind = output_constraint::kind;

// A schema as JSON text: an object (or true/false, which JSON Schema allows) given inline,
// or a string holding one (vLLM accepts both for guided_json).
std::string schema_text(const boost::json::value& v, const std::string& param) {
  if (v.is_string())
    return std::string(v.get_string());
  require(v.is_object() || v.is_bool(), "'" + param + "' must be a JSON schema (an object)", param);
  return boost::json::serialize(v);
}

std::vector<std::string> choice_list(const boost::json::value& v, const std::string& param) {
  require(v.is_array(), "'" + param + "' must be an array of strings", param);
  std::vector<std::string> out;
  for (const auto& c : v.get_array())
    out.emplace_back(to_string(c, param));
  return out;
}

output_constraint from_response_format(const boost::json::value& v) {
  require(v.is_object(), "'response_format' must be an object", "response_format");
  const auto& rf = v.get_object();
  const auto* type = find_field(rf, "type");
  require(type != nullptr, "'response_format' needs a 'type' (text, json_object or json_schema)", "response_format");
  const auto t = to_string(*type, "response_format.type");
  output_constraint c;
  if (t == "text")
    return c;
  if (t == "json_object") {
    c.type = kind::json_object;
    return c;
  }
  require(t == "json_schema",
          "response_format.type must be text, json_object or json_schema, got \"" + std::string(t) + "\"",
          "response_format");
  const auto* js = find_field(rf, "json_schema");
  require(js != nullptr && js->is_object(), "response_format json_schema needs a 'json_schema' object",
          "response_format");
  // OpenAI's form nests the schema under json_schema.schema; a bare schema there is accepted too.
  const auto& inner = js->get_object();
  const auto* schema = find_field(inner, "schema");
  c.type = kind::json_schema;
  c.text = schema != nullptr ? schema_text(*schema, "response_format") : boost::json::serialize(*js);
  return c;
}

// vLLM's structured_outputs: {"json": ..., "regex": ..., "choice": [...], "grammar": ..., "json_object": true}.
output_constraint from_structured_outputs(const boost::json::value& v) {
  require(v.is_object(), "'structured_outputs' must be an object", "structured_outputs");
  const auto& so = v.get_object();
  std::vector<output_constraint> found;
  if (const auto* x = find_field(so, "json"))
    found.push_back({kind::json_schema, schema_text(*x, "structured_outputs.json"), {}});
  if (const auto* x = find_field(so, "regex"))
    found.push_back({kind::regex, std::string(to_string(*x, "structured_outputs.regex")), {}});
  if (const auto* x = find_field(so, "choice"))
    found.push_back({kind::choice, {}, choice_list(*x, "structured_outputs.choice")});
  if (const auto* x = find_field(so, "grammar"))
    found.push_back({kind::grammar, std::string(to_string(*x, "structured_outputs.grammar")), {}});
  if (const auto* x = find_field(so, "json_object"); x != nullptr && to_bool(*x, "structured_outputs.json_object"))
    found.push_back({kind::json_object, {}, {}});
  require(found.size() <= 1, "structured_outputs may set only one of json, regex, choice, grammar, json_object",
          "structured_outputs");
  return found.empty() ? output_constraint{} : found.front();
}

} // namespace

output_constraint read_output_constraint(const boost::json::object& body) {
  std::vector<std::pair<std::string, output_constraint>> found;
  if (const auto* v = find_field(body, "response_format")) {
    auto c = from_response_format(*v);
    if (!c.empty())
      found.emplace_back("response_format", std::move(c));
  }
  if (const auto* v = find_field(body, "structured_outputs")) {
    auto c = from_structured_outputs(*v);
    if (!c.empty())
      found.emplace_back("structured_outputs", std::move(c));
  }
  if (const auto* v = find_field(body, "guided_json"))
    found.emplace_back("guided_json", output_constraint{kind::json_schema, schema_text(*v, "guided_json"), {}});
  if (const auto* v = find_field(body, "guided_regex"))
    found.emplace_back("guided_regex", output_constraint{kind::regex, std::string(to_string(*v, "guided_regex")), {}});
  if (const auto* v = find_field(body, "guided_choice"))
    found.emplace_back("guided_choice", output_constraint{kind::choice, {}, choice_list(*v, "guided_choice")});
  if (const auto* v = find_field(body, "guided_grammar"))
    found.emplace_back("guided_grammar",
                       output_constraint{kind::grammar, std::string(to_string(*v, "guided_grammar")), {}});
  if (found.empty())
    return {};
  if (found.size() > 1)
    reject("only one structured-output constraint may be set, got " + found[0].first + " and " + found[1].first,
           found[1].first);
  return std::move(found.front().second);
}

} // namespace troupe::net
