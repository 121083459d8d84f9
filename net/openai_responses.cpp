// OpenAI response and chunk shapes over Boost.JSON; objects keep insertion
// order, so the fields come out in OpenAI's order.
#include "net/openai_responses.hpp"

#include <boost/json.hpp>

#include <cmath>

#include "net/tool_fields.hpp"

namespace troupe::net {

namespace {
boost::json::object usage_object(const usage_info& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

boost::json::value reason_or_null(std::optional<std::string_view> reason) {
  if (!reason)
    return nullptr;
  return boost::json::string(openai_finish_reason(*reason));
}

// The fields every response and chunk starts with.
boost::json::object head(std::string_view id, std::string_view object, std::int64_t created, std::string_view model) {
  return {{"id", id}, {"object", object}, {"created", created}, {"model", model}};
}

std::string_view chunk_object(endpoint kind) {
  return kind == endpoint::chat ? "chat.completion.chunk" : "text_completion";
}

// One "chat.completion.chunk" of choice `index` carrying `delta`.
std::string chat_delta_chunk(std::string_view id, std::int64_t created, std::string_view model, int index,
                             boost::json::object delta, std::optional<std::string_view> finish_reason,
                             bool include_usage, boost::json::value logprobs) {
  auto body = head(id, chunk_object(endpoint::chat), created, model);
  body["choices"] = boost::json::array{boost::json::object{{"index", index},
                                                           {"delta", std::move(delta)},
                                                           {"logprobs", std::move(logprobs)},
                                                           {"finish_reason", reason_or_null(finish_reason)}}};
  if (include_usage)
    body["usage"] = nullptr;
  return boost::json::serialize(body);
}

boost::json::value number_or_null(float x) {
  if (!std::isfinite(x))
    return nullptr;
  return static_cast<double>(x);
}

std::size_t code_points(std::string_view s) {
  std::size_t n = 0;
  for (unsigned char c : s)
    n += (c & 0xC0) != 0x80;
  return n;
}

boost::json::array utf8_bytes(std::string_view s) {
  boost::json::array out;
  for (unsigned char c : s)
    out.push_back(static_cast<int>(c));
  return out;
}
} // namespace

boost::json::object completion_logprobs(std::span<const token_logprob> list, std::size_t& offset) {
  boost::json::array tokens, token_logprobs, top_logprobs, text_offset;
  for (const auto& lp : list) {
    tokens.push_back(boost::json::string(lp.token));
    token_logprobs.push_back(number_or_null(lp.logprob));
    if (!std::isfinite(lp.logprob)) {
      top_logprobs.push_back(nullptr);
    } else {
      // The chosen token is always among them (OpenAI and vLLM list it even outside the top n).
      boost::json::object top;
      for (const auto& alt : lp.top)
        top.emplace(alt.token, number_or_null(alt.logprob));
      top.emplace(lp.token, number_or_null(lp.logprob));
      top_logprobs.push_back(std::move(top));
    }
    text_offset.push_back(offset);
    offset += code_points(lp.token);
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(text_offset)}};
}

boost::json::object chat_logprobs(std::span<const token_logprob> list) {
  boost::json::array content;
  for (const auto& lp : list) {
    boost::json::array top;
    for (const auto& alt : lp.top)
      top.push_back(boost::json::object{
          {"token", alt.token}, {"logprob", number_or_null(alt.logprob)}, {"bytes", utf8_bytes(alt.token)}});
    content.push_back(boost::json::object{{"token", lp.token},
                                          {"logprob", number_or_null(lp.logprob)},
                                          {"bytes", utf8_bytes(lp.token)},
                                          {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

std::string_view openai_finish_reason(std::string_view engine_reason) {
  if (engine_reason == "cancelled")
    return "abort";
  return engine_reason;
}

std::string completion_response(std::string_view id, std::int64_t created, std::string_view model,
                                std::vector<response_choice> choices, const usage_info& usage) {
  auto body = head(id, "text_completion", created, model);
  boost::json::array list;
  for (std::size_t i = 0; i < choices.size(); ++i)
    list.push_back(boost::json::object{{"index", static_cast<std::int64_t>(i)},
                                       {"text", choices[i].text},
                                       {"logprobs", std::move(choices[i].logprobs)},
                                       {"finish_reason", openai_finish_reason(choices[i].finish_reason)}});
  body["choices"] = std::move(list);
  body["usage"] = usage_object(usage);
  return boost::json::serialize(body);
}

std::string completion_chunk(std::string_view id, std::int64_t created, std::string_view model, int index,
                             std::string_view text, std::optional<std::string_view> finish_reason, bool include_usage,
                             boost::json::value logprobs) {
  auto body = head(id, chunk_object(endpoint::completions), created, model);
  body["choices"] = boost::json::array{boost::json::object{{"index", index},
                                                           {"text", text},
                                                           {"logprobs", std::move(logprobs)},
                                                           {"finish_reason", reason_or_null(finish_reason)}}};
  if (include_usage)
    body["usage"] = nullptr;
  return boost::json::serialize(body);
}

std::string chat_response(std::string_view id, std::int64_t created, std::string_view model,
                          std::vector<response_choice> choices, const usage_info& usage) {
  auto body = head(id, "chat.completion", created, model);
  boost::json::array list;
  for (std::size_t i = 0; i < choices.size(); ++i) {
    boost::json::object message{{"role", "assistant"}, {"content", choices[i].text}};
    if (!choices[i].tool_calls.empty()) {
      // OpenAI: a message that is only calls has content null.
      if (choices[i].text.empty())
        message["content"] = nullptr;
      boost::json::array calls;
      for (const auto& c : choices[i].tool_calls)
        calls.push_back(tool_call_json(c));
      message["tool_calls"] = std::move(calls);
    }
    list.push_back(boost::json::object{{"index", static_cast<std::int64_t>(i)},
                                       {"message", std::move(message)},
                                       {"logprobs", std::move(choices[i].logprobs)},
                                       {"finish_reason", openai_finish_reason(choices[i].finish_reason)}});
  }
  body["choices"] = std::move(list);
  body["usage"] = usage_object(usage);
  return boost::json::serialize(body);
}

std::string chat_chunk(std::string_view id, std::int64_t created, std::string_view model, int index,
                       std::optional<std::string_view> role, std::optional<std::string_view> content,
                       std::optional<std::string_view> finish_reason, bool include_usage, boost::json::value logprobs) {
  boost::json::object delta;
  if (role)
    delta["role"] = *role;
  if (content)
    delta["content"] = *content;
  return chat_delta_chunk(id, created, model, index, std::move(delta), finish_reason, include_usage,
                          std::move(logprobs));
}

std::string chat_tool_calls_chunk(std::string_view id, std::int64_t created, std::string_view model, int index,
                                  std::span<const tool_call> calls, int first_index, bool include_usage) {
  boost::json::array list;
  for (std::size_t i = 0; i < calls.size(); ++i)
    list.push_back(tool_call_json(calls[i], first_index + static_cast<int>(i)));
  return chat_delta_chunk(id, created, model, index, boost::json::object{{"tool_calls", std::move(list)}},
                          std::nullopt, include_usage, nullptr);
}

std::string usage_chunk(endpoint kind, std::string_view id, std::int64_t created, std::string_view model,
                        const usage_info& usage) {
  auto body = head(id, chunk_object(kind), created, model);
  body["choices"] = boost::json::array{};
  body["usage"] = usage_object(usage);
  return boost::json::serialize(body);
}

std::string models_list(std::string_view model_id, std::int64_t created, int max_model_len) {
  boost::json::object model{{"id", model_id},
                            {"object", "model"},
                            {"created", created},
                            {"owned_by", "troupe"},
                            {"max_model_len", max_model_len}};
  boost::json::object body{{"object", "list"}, {"data", boost::json::array{std::move(model)}}};
  return boost::json::serialize(body);
}

std::string sse_event(std::string_view json) {
  std::string out;
  out.reserve(json.size() + 8);
  out.append("data: ").append(json).append("\n\n");
  return out;
}

std::string sse_done() {
  return "data: [DONE]\n\n";
}

} // namespace troupe::net
