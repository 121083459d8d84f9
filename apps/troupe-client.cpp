// troupe-client: streams one completion from a troupe server over WebSocket to
// the terminal as it arrives; the done frame's timings go to stderr at the end.
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <regex>
#include <string>

namespace {

constexpr const char* usage = R"(usage: troupe-client [--url ws://HOST:PORT/v1/stream] [options] PROMPT

Streams the server's completion of PROMPT to stdout; timings go to stderr.
  --url URL           WebSocket endpoint (default ws://127.0.0.1:8080/v1/stream)
  --max-tokens N      (default 128)
  --temperature T     (default 0.8)
  --top-p P, --top-k K, --seed S, --priority P
  --stop STR          stop string (repeatable)
  --chat              send PROMPT as a user message (the model's chat format)
)";

[[noreturn]] void bad_usage(const std::string& message) {
  std::cerr << "troupe-client: " << message << "\n\n" << usage;
  std::exit(2);
}

} // namespace

int main(int argc, char** argv) {
  namespace beast = boost::beast;
  namespace websocket = beast::websocket;
  namespace asio = boost::asio;
  namespace json = boost::json;
  std::string url = "ws://127.0.0.1:8080/v1/stream", prompt;
  json::object frame{{"type", "generate"}, {"id", 1}, {"max_tokens", 128}, {"temperature", 0.8}};
  json::array stops;
  bool chat = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        bad_usage(a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "-h" || a == "--help") {
        std::cout << usage;
        return 0;
      } else if (a == "--url") {
        url = value();
      } else if (a == "--max-tokens") {
        frame["max_tokens"] = std::stoll(value());
      } else if (a == "--temperature") {
        frame["temperature"] = std::stod(value());
      } else if (a == "--top-p") {
        frame["top_p"] = std::stod(value());
      } else if (a == "--top-k") {
        frame["top_k"] = std::stoll(value());
      } else if (a == "--seed") {
        frame["seed"] = std::stoll(value());
      } else if (a == "--priority") {
        frame["priority"] = std::stoll(value());
      } else if (a == "--stop") {
        stops.emplace_back(value());
      } else if (a == "--chat") {
        chat = true;
      } else if (a.starts_with("--")) {
        bad_usage("unknown option " + a);
      } else {
        prompt = a;
      }
    } catch (const std::logic_error&) {
      bad_usage(a + " expects a number");
    }
  }
  if (prompt.empty())
    bad_usage("a PROMPT is required");
  if (chat)
    frame["messages"] = json::array{json::object{{"role", "user"}, {"content", prompt}}};
  else
    frame["prompt"] = prompt;
  if (!stops.empty())
    frame["stop"] = stops;

  std::smatch m;
  static const std::regex ws_url(R"(ws://([^:/]+):(\d+)(/.*)?)");
  if (!std::regex_match(url, m, ws_url))
    bad_usage("--url must look like ws://HOST:PORT/PATH");
  const std::string host = m[1], port = m[2], path = m[3].matched ? std::string(m[3]) : "/v1/stream";

  try {
    asio::io_context ioc;
    asio::ip::tcp::resolver resolver(ioc);
    websocket::stream<asio::ip::tcp::socket> ws(ioc);
    asio::connect(ws.next_layer(), resolver.resolve(host, port));
    ws.handshake(host + ":" + port, path);
    auto sent = std::chrono::steady_clock::now();
    ws.write(asio::buffer(json::serialize(frame)));
    for (;;) {
      beast::flat_buffer buffer;
      ws.read(buffer);
      auto reply = json::parse(beast::buffers_to_string(buffer.data())).as_object();
      auto type = reply.at("type").as_string();
      if (type == "delta") {
        auto& text = reply.at("text").as_string();
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
      } else if (type == "done") {
        double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - sent).count();
        const auto& t = reply.at("timings").as_object();
        const auto& u = reply.at("usage").as_object();
        std::printf("\n");
        std::fprintf(stderr,
                     "[finish_reason=%s, %lld prompt + %lld completion tokens] ttft %.1f ms, tpot %.2f ms, "
                     "e2e %.1f ms (client wall %.1f ms)\n",
                     reply.at("finish_reason").as_string().c_str(),
                     static_cast<long long>(u.at("prompt_tokens").as_int64()),
                     static_cast<long long>(u.at("completion_tokens").as_int64()), t.at("ttft_ms").to_number<double>(),
                     t.at("tpot_ms").to_number<double>(), t.at("e2e_ms").to_number<double>(), wall);
        break;
      } else {
        std::fprintf(stderr, "\ntroupe-client: server error %s: %s\n", json::serialize(reply.at("code")).c_str(),
                     json::serialize(reply.at("message")).c_str());
        return 1;
      }
    }
    beast::error_code ignored;
    ws.close(websocket::close_code::normal, ignored);
  } catch (const std::exception& e) {
    std::cerr << "troupe-client: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
