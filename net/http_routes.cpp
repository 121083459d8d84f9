// troupe-serve's HTTP routes: the table (route_of, needs_api_key), and the session's
// handlers that answer each route: /health, /v1/models, /metrics, /tokenize,
// /detokenize, the playground, and the completions endpoints (their generation runs in
// http_generation.cpp).
#include "net/http_routes.hpp"

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <variant>
#include <vector>

#include "net/engine_ask.hpp"
#include "net/http_response.hpp"
#include "net/http_session.hpp"
#include "net/openai_requests.hpp"
#include "net/openai_responses.hpp"
#include "net/playground_config.hpp"
#include "net/tokenize_requests.hpp"

namespace troupe::net {

http_route route_of(boost::beast::http::verb method, std::string_view target, bool cors_enabled) {
  using verb = boost::beast::http::verb;
  if (method == verb::options && cors_enabled)
    return {http_endpoint::cors_preflight};
  struct fixed_route {
    verb method;
    std::string_view path;
    http_endpoint endpoint;
  };
  static constexpr fixed_route fixed[] = {
      {verb::get, "/health", http_endpoint::health},
      {verb::get, "/v1/models", http_endpoint::models},
      {verb::get, "/metrics", http_endpoint::metrics},
      {verb::post, "/tokenize", http_endpoint::tokenize},
      {verb::post, "/detokenize", http_endpoint::detokenize},
      {verb::post, "/v1/completions", http_endpoint::completions},
      {verb::post, "/v1/chat/completions", http_endpoint::chat_completions},
  };
  for (const auto& r : fixed)
    if (r.method == method && r.path == target)
      return {r.endpoint};
  if (method == verb::get && target == "/playground/config")
    return {http_endpoint::playground_config};
  if (method == verb::get)
    if (auto asset = find_static_asset(target))
      return {http_endpoint::static_file, asset};
  for (const auto& r : fixed)
    if (r.path == target)
      return {http_endpoint::method_not_allowed};
  return {http_endpoint::not_found};
}

bool needs_api_key(std::string_view target, bool metrics_auth) {
  if (target == "/metrics")
    return metrics_auth;
  return target.starts_with("/v1/") || target == "/tokenize" || target == "/detokenize";
}

// --- the session's handlers --------------------------------------------------------

namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;

template <class Stream>
void http_session<Stream>::route(const http::request<http::string_body>& req) {
  const std::string target(req.target());
  const auto& cfg = ctx_->cfg;
  const auto r = route_of(req.method(), target, cfg.cors.enabled());
  if (r.endpoint == http_endpoint::cors_preflight) {
    reply(cfg.cors.preflight_response(origin_, keep_alive_));
    return;
  }
  if (!authorized_ && cfg.keys.required() && needs_api_key(target, cfg.metrics_auth)) {
    reply_error(unauthorized(req[http::field::authorization].empty()
                                 ? "an API key is required: send 'Authorization: Bearer <key>'"
                                 : "the API key is not valid"),
                keep_alive_);
    return;
  }
  const bool asks_engine = r.endpoint == http_endpoint::metrics || r.endpoint == http_endpoint::tokenize ||
                           r.endpoint == http_endpoint::detokenize || r.endpoint == http_endpoint::completions ||
                           r.endpoint == http_endpoint::chat_completions;
  if (!ctx_->engine_up && asks_engine) {
    reply_error({503, "server_error", engine_gone_message, "", "engine_unavailable"}, keep_alive_);
    return;
  }
  switch (r.endpoint) {
    case http_endpoint::health:
      if (ctx_->engine_up)
        reply(json_response(200, R"({"status":"ok"})", keep_alive_));
      else
        reply(json_response(503, R"({"status":"engine_unavailable"})", keep_alive_));
      break;
    case http_endpoint::models:
      reply(json_response(200, models_list(ctx_->info.name, unix_now(), ctx_->info.max_model_len), keep_alive_));
      break;
    case http_endpoint::metrics:
      metrics();
      break;
    case http_endpoint::tokenize:
      tokenize(req.body());
      break;
    case http_endpoint::detokenize:
      detokenize(req.body());
      break;
    case http_endpoint::completions: {
      auto parsed = parse_completion_request(req.body(), cfg.limits);
      if (auto* err = std::get_if<api_error>(&parsed)) {
        reply_error(*err, keep_alive_);
        return;
      }
      auto& c = std::get<completion_request>(parsed);
      generate(std::move(c.spec), c.stream ? reply_shape::completion_sse : reply_shape::completion_json,
               c.include_usage, c.logprobs >= 0);
      break;
    }
    case http_endpoint::chat_completions: {
      auto parsed = parse_chat_request(req.body(), cfg.limits);
      if (auto* err = std::get_if<api_error>(&parsed)) {
        reply_error(*err, keep_alive_);
        return;
      }
      auto& c = std::get<chat_request>(parsed);
      generate(std::move(c.spec), c.stream ? reply_shape::chat_sse : reply_shape::chat_json, c.include_usage,
               c.top_logprobs >= 0);
      break;
    }
    case http_endpoint::playground_config:
      reply(json_response(200, playground_config(ctx_->info, cfg.limits), keep_alive_));
      break;
    case http_endpoint::static_file:
      reply(text_response(200, r.asset->content_type, r.asset->body, keep_alive_)); // the playground page
      break;
    case http_endpoint::method_not_allowed:
      reply_error({405, "invalid_request_error", "method not allowed for " + target, "", "method_not_allowed"},
                  keep_alive_);
      break;
    case http_endpoint::cors_preflight:
    case http_endpoint::not_found:
      reply_error(not_found("no route for " + target), keep_alive_);
      break;
  }
}

template <class Stream>
void http_session<Stream>::metrics() {
  hold_self();
  ask_engine<engine_stats, http_session>(
      ctx_, this->weak_from_this(),
      [](http_session& s, engine_stats* stats, const std::string& error) {
        s.release_self();
        if (!stats) {
          s.reply_error(unavailable("the engine did not answer: " + error), s.keep_alive_);
          return;
        }
        s.reply(text_response(200, "text/plain; version=0.0.4", s.ctx_->metrics.render(*stats, s.ctx_->info.name),
                              s.keep_alive_));
      },
      stats_atom::value);
}

template <class Stream>
void http_session<Stream>::tokenize(const std::string& body) {
  auto parsed = parse_tokenize_request(body);
  if (auto* err = std::get_if<api_error>(&parsed)) {
    reply_error(*err, keep_alive_);
    return;
  }
  auto& r = std::get<tokenize_request>(parsed);
  hold_self();
  ask_engine<std::vector<token_id>, http_session>(
      ctx_, this->weak_from_this(),
      [](http_session& s, std::vector<token_id>* ids, const std::string& error) {
        s.release_self();
        if (!ids) {
          s.reply_error(invalid_request(error, "prompt"), s.keep_alive_);
          return;
        }
        s.reply(json_response(200, tokenize_response(*ids, s.ctx_->info.max_model_len), s.keep_alive_));
      },
      tokenize_atom::value, std::move(r.prompt), r.add_special_tokens);
}

template <class Stream>
void http_session<Stream>::detokenize(const std::string& body) {
  auto parsed = parse_detokenize_request(body, ctx_->info.vocab_size);
  if (auto* err = std::get_if<api_error>(&parsed)) {
    reply_error(*err, keep_alive_);
    return;
  }
  hold_self();
  ask_engine<std::string, http_session>(
      ctx_, this->weak_from_this(),
      [](http_session& s, std::string* text, const std::string& error) {
        s.release_self();
        if (!text) {
          s.reply_error(invalid_request(error, "tokens"), s.keep_alive_);
          return;
        }
        s.reply(json_response(200, detokenize_response(*text), s.keep_alive_));
      },
      detok_atom::value, std::get<std::vector<token_id>>(std::move(parsed)));
}

// For both streams; the session's other members are instantiated in http_session.cpp.
template void http_session<plain_stream>::route(const http::request<http::string_body>& req);
template void http_session<plain_stream>::metrics();
template void http_session<plain_stream>::tokenize(const std::string& body);
template void http_session<plain_stream>::detokenize(const std::string& body);
template void http_session<tls_stream>::route(const http::request<http::string_body>& req);
template void http_session<tls_stream>::metrics();
template void http_session<tls_stream>::tokenize(const std::string& body);
template void http_session<tls_stream>::detokenize(const std::string& body);

} // namespace troupe::net
