// troupe's server in front of an engine in another process (troupe-engine, a child process): it serves
// HTTP and WebSocket requests as it serves a local engine, and when that process is killed, requests in
// flight end with engine_unavailable, later ones get 503 at once, /health says so, and the routes that do
// not need the engine keep answering.
#include <doctest/doctest.h>

#include "net/server.hpp"
#include "tests/support/engine_process.hpp"
#include "tests/support/run_command.hpp"
#include "tests/support/served_engine.hpp"
#include "troupe/remote_engine.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

const std::string greedy_body = R"({"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0})";

} // namespace

TEST_CASE("a server in front of a killed engine process answers 503 engine_unavailable and keeps serving") {
  engine_process engine_child;

  caf::actor_system_config cfg;
  caf::actor_system sys{remote_ready(cfg)};
  const auto engine = connect_engine(sys, "127.0.0.1", engine_child.port);
  model_info info;
  {
    caf::scoped_actor self{sys};
    self->request(engine, std::chrono::seconds(30), info_atom::value)
        .receive([&](model_info& i) { info = std::move(i); }, [&](caf::error& e) { FAIL(sys.render(e)); });
  }
  net::server_config scfg;
  scfg.port = 0;
  net::server server(sys, engine, info, scfg);
  const auto port = server.start();

  // The same answer as a server with the engine in its own process.
  std::string local_text;
  {
    served_engine local;
    const auto r = http_call(local.port, http::verb::post, "/v1/completions", greedy_body);
    REQUIRE(r.status == 200);
    local_text = json_of(r.body).at("choices").as_array().at(0).at("text").as_string().c_str();
  }
  const auto r = http_call(port, http::verb::post, "/v1/completions", greedy_body);
  REQUIRE(r.status == 200);
  CHECK(json_of(r.body).at("choices").as_array().at(0).at("text").as_string() == local_text);
  {
    ws_client ws(port);
    ws.send(R"({"type":"generate","id":"w","prompt":"Once upon a time","max_tokens":24,"temperature":0})");
    std::string text;
    const auto end = ws_read_to_end(ws.ws, &text);
    CHECK(end.at("type") == "done");
    CHECK(text == local_text);
  }
  CHECK(http_call(port, http::verb::get, "/health", "").status == 200);

  // A long stream over WebSocket when the engine's process dies: it ends with an error frame.
  ws_client ws(port);
  ws.send(R"({"type":"generate","id":"long","prompt":"Once upon a time","max_tokens":400,"ignore_eos":true})");
  CHECK(ws.read().at("type") == "delta");
  engine_child.process.kill();
  auto end = ws_read_to_end(ws.ws);
  CHECK(end.at("type") == "error");
  CHECK(end.at("code") == "engine_unavailable");

  // Later requests: 503 at once (bounded here by the wait for the server to see the engine go).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  http_reply after;
  do {
    after = http_call(port, http::verb::post, "/v1/completions", greedy_body);
  } while (after.status != 503 && std::chrono::steady_clock::now() < deadline);
  CHECK(after.status == 503);
  CHECK(json_of(after.body).at("error").at("code") == "engine_unavailable");
  const auto health = http_call(port, http::verb::get, "/health", "");
  CHECK(health.status == 503);
  CHECK(json_of(health.body).at("status") == "engine_unavailable");
  CHECK(http_call(port, http::verb::get, "/metrics", "").status == 503);
  CHECK(http_call(port, http::verb::post, "/tokenize", R"({"prompt":"hi"})").status == 503);
  CHECK(http_call(port, http::verb::get, "/v1/models", "").status == 200); // the server itself still serves
  ws.send(R"({"type":"generate","id":"again","prompt":"Hi","max_tokens":4})");
  const auto again = ws_read_to_end(ws.ws);
  CHECK(again.at("code") == "engine_unavailable");
  server.stop();
}

TEST_CASE("troupe-serve serves a troupe-engine process, and refuses bad router and engine-server settings") {
  engine_process engine_child;
  child_process serve((bin_dir() / "troupe-serve").string(),
                      {"--server.port=0", "--router.engines=[\"127.0.0.1:" + engine_child.port_text + "\"]"});
  const auto port = serve.wait_for_line(R"(listening on 127\.0\.0\.1:(\d+))");
  REQUIRE_MESSAGE(port, serve.output());
  CHECK(serve.output().find("serving the engine at 127.0.0.1:" + engine_child.port_text) != std::string::npos);
  const auto r = http_call(static_cast<std::uint16_t>(std::stoi(*port)), http::verb::post, "/v1/completions",
                           R"({"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0})");
  REQUIRE(r.status == 200);
  CHECK(golden_first_text.starts_with(json_of(r.body).at("choices").as_array().at(0).at("text").as_string().c_str()));
  CHECK(serve.stop() == 0);
  CHECK(engine_child.process.stop() == 0); // SIGTERM: a clean shutdown

  const auto serve_bin = shell_quoted((bin_dir() / "troupe-serve").string());
  const auto engine_bin = shell_quoted((bin_dir() / "troupe-engine").string());
  const std::pair<std::string, std::string> refused[] = {
      {serve_bin + " --router.engines='[\"127.0.0.1:1\"]'", "cannot reach an engine at 127.0.0.1:1"},
      {serve_bin + " --router.engines='[\"127.0.0.1:1\",\"127.0.0.1:2\"]'", "cannot reach an engine at 127.0.0.1:1"},
      {serve_bin + " --router.engines='[\"nohost\"]'", "'nohost' has no port"},
      {serve_bin + " --router.engines='[\"h:99999\"]'", "port outside 1-65535"},
      {engine_bin + " --engine-server.host=0.0.0.0", "is not a loopback address"},
      {engine_bin + " --engine-server.port=70000", "invalid value for engine-server.port"},
  };
  for (const auto& [command, message] : refused) {
    INFO(command);
    const auto result = run_command(command);
    CHECK(result.exit_code == 1);
    CHECK_MESSAGE(result.output.find(message) != std::string::npos, result.output);
  }
}

TEST_CASE("troupe-serve routes over two troupe-engine processes, and refuses a bad router.policy") {
  engine_process first, second;
  const std::string engines =
      "--router.engines=[\"127.0.0.1:" + first.port_text + "\",\"127.0.0.1:" + second.port_text + "\"]";
  child_process serve((bin_dir() / "troupe-serve").string(),
                      {"--server.port=0", engines, "--router.policy=least-loaded"});
  const auto port = serve.wait_for_line(R"(listening on 127\.0\.0\.1:(\d+))");
  REQUIRE_MESSAGE(port, serve.output());
  CHECK(serve.output().find("routing least-loaded over 2 engines") != std::string::npos);
  for (int i = 0; i < 4; ++i) {
    const auto r = http_call(static_cast<std::uint16_t>(std::stoi(*port)), http::verb::post, "/v1/completions",
                             R"({"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0})");
    REQUIRE(r.status == 200);
    CHECK(golden_first_text.starts_with(json_of(r.body).at("choices").as_array().at(0).at("text").as_string().c_str()));
  }
  CHECK(serve.stop() == 0);
  const auto refused = run_command(shell_quoted((bin_dir() / "troupe-serve").string()) + " " + shell_quoted(engines) +
                                   " --router.policy=random");
  CHECK(refused.exit_code == 1);
  CHECK_MESSAGE(refused.output.find("router.policy: 'random'") != std::string::npos, refused.output);
}
