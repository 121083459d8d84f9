// WebSocket frames. Reply frames are written by hand around the client's id,
// which is kept as JSON text so that it comes back exactly as it was typed.
#include "net/ws_frames.hpp"

#include <boost/json.hpp>

#include <charconv>
#include <cmath>

#include "net/json_fields.hpp"
#include "net/prompt_fields.hpp"
#include "net/sampling_fields.hpp"
#include "net/tool_fields.hpp"

namespace troupe::net {

namespace {

// The id as JSON text: a string or an integer, nothing else (floats don't
// compare reliably, objects are not ids).
std::string read_id(const boost::json::object& frame) {
  auto* id = frame.if_contains("id");
  if (!id)
    reject("'id' is required", "id");
  if (!id->is_string() && !id->is_int64() && !id->is_uint64())
    reject("'id' must be a string or an integer", "id");
  return boost::json::serialize(*id);
}

ws_generate read_generate(const boost::json::object& frame, const request_limits& limits) {
  ws_generate g;
  auto* prompt = find_field(frame, "prompt");
  auto* prompt_ids = find_field(frame, "prompt_ids");
  auto* messages = find_field(frame, "messages");
  int given = (prompt != nullptr) + (prompt_ids != nullptr) + (messages != nullptr);
  require(given == 1, "a generate frame needs exactly one of prompt, prompt_ids, messages", "prompt");
  if (prompt)
    read_prompt(*prompt, limits, g.spec);
  if (prompt_ids)
    g.spec.prompt_ids = read_token_ids(*prompt_ids, "prompt_ids", limits);
  if (messages) {
    g.spec.messages = read_messages(*messages);
    g.spec.add_special_tokens = false; // the chat template writes them
  }
  read_tool_fields(frame, g.spec); // the engine refuses tools without messages
  require(messages != nullptr || find_field(frame, "chat_template_kwargs") == nullptr,
          "chat_template_kwargs is only taken with messages", "chat_template_kwargs");
  read_chat_template_kwargs(frame, g.spec);
  if (auto b = read_bool(frame, "add_special_tokens"))
    g.spec.add_special_tokens = *b;
  g.stream = read_bool(frame, "stream").value_or(true);
  read_sampling_fields(frame, limits, messages ? limits.max_tokens_limit : default_max_tokens, g.spec);
  g.spec.params.logprobs = read_logprobs_count(frame, "logprobs", limits);
  g.spec.echo = read_bool(frame, "echo").value_or(false);
  validate_sampling(g.spec.params);
  return g;
}

void append_number(std::string& out, double x) {
  if (!std::isfinite(x)) {
    out += "null"; // JSON has no NaN or infinity
    return;
  }
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, x);
  out.append(buffer, ec == std::errc() ? end : buffer);
}

void append_int(std::string& out, long long x) {
  char buffer[24];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, x);
  out.append(buffer, end);
}

// `{"type":"<type>","id":<id>` — every reply frame starts so.
std::string frame_head(std::string_view type, std::string_view id_json) {
  std::string out;
  out.reserve(128);
  out.append("{\"type\":\"").append(type).append("\",\"id\":");
  out.append(id_json.empty() ? std::string_view("null") : id_json);
  return out;
}

boost::json::value logprob_number(float x) {
  if (!std::isfinite(x))
    return nullptr;
  return static_cast<double>(x);
}

boost::json::array logprob_list(std::span<const token_logprob> list) {
  boost::json::array out;
  for (const auto& lp : list) {
    boost::json::array top;
    for (const auto& alt : lp.top)
      top.push_back(
          boost::json::object{{"token_id", alt.id}, {"token", alt.token}, {"logprob", logprob_number(alt.logprob)}});
    out.push_back(boost::json::object{{"token_id", lp.id},
                                      {"token", lp.token},
                                      {"logprob", logprob_number(lp.logprob)},
                                      {"top_logprobs", std::move(top)}});
  }
  return out;
}

void append_string_field(std::string& out, std::string_view name, std::string_view value) {
  out.append(",\"").append(name).append("\":");
  out.append(boost::json::serialize(boost::json::string_view(value.data(), value.size())));
}
} // namespace

std::variant<ws_generate, ws_cancel, ws_auth, ws_rejected> parse_ws_frame(std::string_view text,
                                                                          const request_limits& limits) {
  std::string id_json = "null";
  try {
    boost::json::monotonic_resource arena;
    auto frame = parse_object(text, limits.max_json_depth, &arena);
    if (auto* type = frame.if_contains("type"); type && type->is_string() && type->get_string() == "auth") {
      auto key = read_string(frame, "key");
      require(key.has_value(), "an auth frame needs a string 'key'", "key");
      return ws_auth{std::string(*key)};
    }
    id_json = read_id(frame);
    auto* type = frame.if_contains("type");
    if (!type)
      reject("'type' is required", "type");
    auto t = to_string(*type, "type");
    if (t == "generate") {
      auto g = read_generate(frame, limits);
      g.id_json = id_json;
      return g;
    }
    if (t == "cancel")
      return ws_cancel{id_json};
    reject("unknown frame type '" + std::string(t) + "': expected generate, cancel or auth", "type");
  } catch (const request_rejected& r) {
    return ws_rejected{id_json, r.error()};
  }
}

std::string delta_frame(std::string_view id_json, std::string_view text, std::span<const token_id> ids,
                        std::span<const token_logprob> logprobs, std::span<const token_logprob> prompt_logprobs,
                        std::string_view prompt_text, int index, std::string_view finish_reason,
                        std::span<const tool_call> tool_calls, int first_call) {
  auto out = frame_head("delta", id_json);
  out.append(",\"index\":");
  append_int(out, index);
  append_string_field(out, "text", text);
  out.append(",\"token_ids\":[");
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i > 0)
      out += ',';
    append_int(out, ids[i]);
  }
  out += ']';
  if (!logprobs.empty())
    out.append(",\"logprobs\":").append(boost::json::serialize(logprob_list(logprobs)));
  if (!prompt_logprobs.empty())
    out.append(",\"prompt_logprobs\":").append(boost::json::serialize(logprob_list(prompt_logprobs)));
  if (!prompt_text.empty())
    append_string_field(out, "prompt_text", prompt_text);
  if (!tool_calls.empty()) {
    boost::json::array calls;
    for (std::size_t i = 0; i < tool_calls.size(); ++i)
      calls.push_back(tool_call_json(tool_calls[i], first_call + static_cast<int>(i)));
    out.append(",\"tool_calls\":").append(boost::json::serialize(calls));
  }
  if (!finish_reason.empty())
    append_string_field(out, "finish_reason", finish_reason);
  out += '}';
  return out;
}

std::string done_frame(std::string_view id_json, const finished& result) {
  auto out = frame_head("done", id_json);
  append_string_field(out, "finish_reason", result.reason);
  const auto& u = result.usage;
  out.append(",\"usage\":{\"prompt_tokens\":");
  append_int(out, u.prompt_tokens);
  out.append(",\"completion_tokens\":");
  append_int(out, u.completion_tokens);
  out.append(",\"total_tokens\":");
  append_int(out, static_cast<long long>(u.prompt_tokens) + u.completion_tokens);
  out.append(",\"cached_tokens\":");
  append_int(out, u.cached_tokens);
  const auto& t = result.timings;
  out.append("},\"timings\":{\"queue_ms\":");
  append_number(out, t.queue_ms);
  out.append(",\"ttft_ms\":");
  append_number(out, t.ttft_ms);
  out.append(",\"tpot_ms\":");
  append_number(out, t.tpot_ms);
  out.append(",\"e2e_ms\":");
  append_number(out, t.e2e_ms);
  out.append("}}");
  return out;
}

std::string error_frame(std::string_view id_json, std::string_view code, std::string_view message) {
  auto out = frame_head("error", id_json);
  append_string_field(out, "code", code);
  append_string_field(out, "message", message);
  out += '}';
  return out;
}

} // namespace troupe::net
