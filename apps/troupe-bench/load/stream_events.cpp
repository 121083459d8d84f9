// Interprets the server's stream. Only chunks with output count as chunks: our SSE
// finish chunk carries no text and would otherwise add a near-zero inter-token gap.
#include "apps/troupe-bench/load/stream_events.hpp"

#include <boost/json.hpp>

namespace troupe::bench {

namespace {
namespace json = boost::json;

void read_usage(const json::value* usage, stream_event& e) {
  if (!usage || !usage->is_object())
    return;
  const auto& u = usage->get_object();
  if (auto* p = u.if_contains("prompt_tokens"); p && p->is_int64())
    e.prompt_tokens = static_cast<int>(p->get_int64());
  if (auto* c = u.if_contains("completion_tokens"); c && c->is_int64())
    e.completion_tokens = static_cast<int>(c->get_int64());
}

std::string text_of(const json::value* v) {
  if (!v)
    return {};
  if (v->is_string())
    return std::string(v->get_string());
  return json::serialize(*v);
}

stream_event error_event(std::string message) {
  stream_event e;
  e.what = stream_event::kind::error;
  e.error = std::move(message);
  return e;
}
} // namespace

stream_event read_ws_frame(std::string_view text) {
  json::error_code ec;
  auto parsed = json::parse(text, ec);
  if (ec || !parsed.is_object())
    return error_event("unreadable frame from the server: " + std::string(text.substr(0, 200)));
  const auto& f = parsed.get_object();
  stream_event e;
  if (auto* id = f.if_contains("id"); id && id->is_int64())
    e.id = id->get_int64();
  auto* type = f.if_contains("type");
  if (!type || !type->is_string())
    return e;
  const auto& t = type->get_string();
  if (t == "delta") {
    auto* ids = f.if_contains("token_ids");
    e.tokens = ids && ids->is_array() ? static_cast<int>(ids->get_array().size()) : 0;
    auto* piece = f.if_contains("text");
    bool has_text = piece && piece->is_string() && !piece->get_string().empty();
    if (e.tokens > 0 || has_text)
      e.what = stream_event::kind::output;
  } else if (t == "done") {
    e.what = stream_event::kind::done;
    read_usage(f.if_contains("usage"), e);
  } else if (t == "error") {
    e.what = stream_event::kind::error;
    e.error = text_of(f.if_contains("code")) + ": " + text_of(f.if_contains("message"));
  }
  return e;
}

stream_event read_sse_data(std::string_view data) {
  stream_event e;
  if (data == "[DONE]") {
    e.what = stream_event::kind::done;
    return e;
  }
  json::error_code ec;
  auto parsed = json::parse(data, ec);
  if (ec || !parsed.is_object())
    return error_event("unreadable SSE data: " + std::string(data.substr(0, 200)));
  const auto& chunk = parsed.get_object();
  if (auto* err = chunk.if_contains("error")) {
    const json::value* message = err->is_object() ? err->get_object().if_contains("message") : err;
    return error_event(text_of(message));
  }
  auto* choices = chunk.if_contains("choices");
  if (choices && choices->is_array() && !choices->get_array().empty()) {
    const auto& c = choices->get_array().front();
    auto* text = c.is_object() ? c.get_object().if_contains("text") : nullptr;
    if (text && text->is_string() && !text->get_string().empty()) {
      e.what = stream_event::kind::output;
      e.tokens = 1;
    }
    return e;
  }
  if (auto* usage = chunk.if_contains("usage"); usage && usage->is_object()) {
    e.what = stream_event::kind::usage;
    read_usage(usage, e);
  }
  return e;
}

bool apply_event(const stream_event& e, double t, request_record& r) {
  if (e.prompt_tokens || e.completion_tokens) {
    r.prompt_tokens = e.prompt_tokens.value_or(r.prompt_tokens);
    r.output_tokens = e.completion_tokens.value_or(r.output_tokens);
    r.usage_reported = true;
  }
  switch (e.what) {
    case stream_event::kind::output:
      r.chunk_s.push_back(t);
      r.streamed_tokens += e.tokens;
      return false;
    case stream_event::kind::done:
      r.end_s = t;
      r.success = r.error.empty();
      if (!r.usage_reported)
        r.output_tokens = r.streamed_tokens;
      return true;
    case stream_event::kind::error:
      r.end_s = t;
      r.success = false;
      r.error = e.error.empty() ? "the server reported an error" : e.error;
      return true;
    default:
      return false;
  }
}

} // namespace troupe::bench
