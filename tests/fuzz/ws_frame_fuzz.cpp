// Fuzzes parse_ws_frame (net/ws_frames): any text a client sends on /v1/stream is either
// a request within the server's limits or refused with an error frame a client can parse.
#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>

#include "fuzz_support.hpp"
#include "net/ws_frames.hpp"

namespace {

using namespace troupe;
using namespace troupe::net;
using fuzz::check;

// The id is echoed verbatim into every reply frame: it must be JSON a client reads back.
void check_id(const std::string& id_json) {
  boost::json::error_code ec;
  const auto id = boost::json::parse(id_json, ec);
  check(!ec && (id.is_string() || id.is_int64() || id.is_uint64()), "the echoed id is a JSON string or integer",
        id_json);
}

void check_generate(const ws_generate& g, const request_limits& limits) {
  check_id(g.id_json);
  const auto& spec = g.spec;
  check(spec.messages.empty() || spec.prompt_ids.empty(), "one prompt source: messages or prompt_ids");
  // Tools as the engine takes them: valid names, parameters and history arguments JSON objects.
  check(spec.tools.size() <= static_cast<std::size_t>(max_tools), "tools within the limit");
  for (const auto& t : spec.tools) {
    check(valid_tool_name(t.name), "tool names are valid", t.name);
    boost::json::error_code ec;
    check(boost::json::parse(t.parameters, ec).is_object() && !ec, "tool parameters are a JSON object", t.parameters);
  }
  for (const auto& m : spec.messages)
    for (const auto& c : m.tool_calls) {
      boost::json::error_code ec;
      check(boost::json::parse(c.arguments, ec).is_object() && !ec, "tool call arguments are a JSON object",
            c.arguments);
    }
  check(spec.prompt_ids.size() <= static_cast<std::size_t>(limits.max_prompt_tokens), "prompt_ids within the limit");
  for (const auto id : spec.prompt_ids)
    check(id >= 0, "prompt ids are >= 0");
  const auto& p = spec.params;
  check(p.max_tokens >= 1 && p.max_tokens <= limits.max_tokens_limit, "max_tokens within [1, limit]");
  check(p.stop.size() <= limits.max_stop_strings, "stop strings within the limit");
  for (const auto& s : p.stop)
    check(!s.empty() && s.size() <= limits.max_stop_length, "stop string lengths");
  try {
    p.validate(); // what the engine checks again: a frame let through must pass
  } catch (const std::exception& e) {
    check(false, "an accepted frame fails sampling_params::validate", e.what());
  }
  // The reply frames built around the client's id and its prompt text parse as JSON.
  const token_id ids[] = {1, 2};
  check(fuzz::parses_as_json(delta_frame(g.id_json, spec.prompt, ids, {}, {}, spec.prompt)), "delta frame is JSON");
  for (const auto& m : spec.messages)
    if (!m.tool_calls.empty())
      check(fuzz::parses_as_json(delta_frame(g.id_json, "", {}, {}, {}, {}, 0, "tool_calls", m.tool_calls, 0)),
            "a delta frame with tool calls is JSON");
  check(fuzz::parses_as_json(done_frame(g.id_json, finished{})), "done frame is JSON");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const request_limits limits; // the server's defaults
  const auto frame = parse_ws_frame(fuzz::as_text(data, size), limits);
  if (const auto* g = std::get_if<ws_generate>(&frame)) {
    check_generate(*g, limits);
  } else if (const auto* c = std::get_if<ws_cancel>(&frame)) {
    check_id(c->id_json);
  } else if (const auto* r = std::get_if<ws_rejected>(&frame)) {
    check(r->error.status == 400 && !r->error.message.empty(), "a refusal is a 400 with a message");
    const auto reply = error_frame(r->id_json, ws_invalid_request, r->error.message);
    check(fuzz::parses_as_json(reply), "the error frame is JSON", reply);
  }
  return 0;
}
