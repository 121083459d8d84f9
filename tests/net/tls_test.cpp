// TLS on the front door: with a certificate the one port serves HTTPS and WSS
// (completions as JSON and SSE, chat, /health, /metrics, the playground,
// /v1/stream), to Beast clients and to Python's ssl, urllib and websockets
// verifying against the certificate as their CA; plain HTTP on that port is
// not served and does not disturb TLS clients; and a missing, garbage or
// mismatched certificate or key stops the start with a message naming the key,
// the file and OpenSSL's reason. The certificates are made here with the
// openssl command: without it these tests fail, they do not skip.
#include <doctest/doctest.h>

#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>

#include "net/tls_context.hpp"
#include "tests/support/run_command.hpp"
#include "tests/support/served_engine.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;
using namespace troupe::testing;
namespace ssl = boost::asio::ssl;
namespace fs = std::filesystem;

namespace {

// A self-signed certificate for 127.0.0.1 (and a second key that does not
// belong to it), made once per test binary.
struct test_certificate {
  temp_dir dir{"troupe_tls_test"};
  fs::path cert = dir.path / "cert.pem";
  fs::path key = dir.path / "key.pem";
  fs::path other_key = dir.path / "other_key.pem";

  test_certificate() {
    auto made = run_command(
        "openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 "
        "-addext subjectAltName=IP:127.0.0.1 -days 1 -keyout " +
        shell_quoted(key.string()) + " -out " + shell_quoted(cert.string()));
    INFO("openssl req: ", made.output);
    REQUIRE_MESSAGE(made.exit_code == 0,
                    "the openssl command is needed to make a test certificate "
                    "(scripts/install-deps installs it)");
    auto other = run_command("openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out " +
                             shell_quoted(other_key.string()));
    INFO("openssl genpkey: ", other.output);
    REQUIRE(other.exit_code == 0);
  }
};

const test_certificate& certificate() {
  static test_certificate c;
  return c;
}

net::server_config tls_config() {
  net::server_config cfg;
  cfg.tls = {certificate().cert.string(), certificate().key.string()};
  return cfg;
}

// A client context that trusts only the test certificate and checks the peer is 127.0.0.1.
struct tls_client {
  asio::io_context ioc;
  ssl::context ctx{ssl::context::tls_client};
  tls_client() {
    ctx.load_verify_file(certificate().cert.string());
    ctx.set_verify_mode(ssl::verify_peer);
  }
  beast::ssl_stream<beast::tcp_stream> connect(std::uint16_t port) {
    beast::ssl_stream<beast::tcp_stream> stream(ioc, ctx);
    stream.set_verify_callback(ssl::host_name_verification("127.0.0.1"));
    beast::get_lowest_layer(stream).connect(local_endpoint(port));
    stream.handshake(ssl::stream_base::client);
    return stream;
  }
  http_reply call(std::uint16_t port, http::verb verb, const std::string& target, const std::string& body = {}) {
    auto stream = connect(port);
    beast::flat_buffer buffer;
    return exchange(stream, buffer, make_request(verb, target, body));
  }
};

// A connection is "clean" when the server ended it with TLS's close_notify: for
// a close-delimited body (SSE), that is how the client knows it got all of it.
bool ended_cleanly(const http_reply& r) {
  return !r.read_error || r.read_error == http::error::end_of_stream;
}

} // namespace

TEST_CASE("TLS: a verifying Beast client gets completions as JSON and SSE, chat, health, metrics and the page") {
  served_engine s(tls_config());
  tls_client client;
  const std::string request = R"({"prompt":"Once upon a time","max_tokens":64,"temperature":0,"ignore_eos":true)";

  auto plain = client.call(s.port, http::verb::post, "/v1/completions", request + "}");
  REQUIRE(plain.status == 200);
  CHECK(json_of(plain.body).at("choices").at(0).at("text").as_string() == golden_first_text);

  auto streamed = client.call(s.port, http::verb::post, "/v1/completions", request + R"(,"stream":true})");
  REQUIRE(streamed.status == 200);
  std::string finish;
  CHECK(sse_text(streamed.body, false, &finish) == golden_first_text);
  CHECK(finish == "length");
  CHECK(streamed.body.find("data: [DONE]\n\n") != std::string::npos);
  INFO("read_error: ", streamed.read_error.message());
  CHECK(ended_cleanly(streamed)); // close_notify, not a cut connection

  auto chat = client.call(s.port, http::verb::post, "/v1/chat/completions",
                          R"({"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":8,"stream":true})");
  CHECK(chat.status == 200);
  CHECK_FALSE(sse_text(chat.body, true).empty());
  CHECK(client.call(s.port, http::verb::get, "/health").status == 200);
  auto metrics = client.call(s.port, http::verb::get, "/metrics");
  CHECK(metrics.status == 200);
  CHECK(metrics.body.find("troupe:generation_tokens_total") != std::string::npos);
  auto page = client.call(s.port, http::verb::get, "/");
  CHECK(page.status == 200);
  CHECK(page.body.find("<html") != std::string::npos);

  // Keep-alive over one TLS connection: two requests in a row.
  auto stream = client.connect(s.port);
  beast::flat_buffer buffer;
  for (int i = 0; i < 2; ++i) {
    auto r = exchange(stream, buffer,
                      make_request(http::verb::post, "/v1/completions",
                                   R"({"prompt":"Once upon a time","max_tokens":4,"temperature":0})"));
    CHECK(r.status == 200);
  }
}

TEST_CASE("TLS: a WSS client streams a generation over /v1/stream") {
  served_engine s(tls_config());
  tls_client client;
  websocket::stream<beast::ssl_stream<beast::tcp_stream>> ws(client.connect(s.port));
  ws.handshake("127.0.0.1", "/v1/stream");
  ws_send(ws, R"({"type":"generate","id":"a","prompt":"Once upon a time","max_tokens":64,"temperature":0,)"
              R"("ignore_eos":true})");
  std::string text;
  auto done = ws_read_to_end(ws, &text);
  CHECK(done.at("type") == "done");
  CHECK(done.at("finish_reason") == "length");
  CHECK(text == golden_first_text);
  ws.close(websocket::close_code::normal);
}

TEST_CASE("TLS: Python's ssl with urllib and websockets, trusting the test certificate, get answers") {
  served_engine s(tls_config());
  const fs::path script = data_root() / "tests" / "net" / "tls_python_client.py";
  // Debian's python3 with python3-websockets (scripts/install-deps); a missing one fails the test.
  auto r = run_command("/usr/bin/python3 " + shell_quoted(script.string()) + " " + std::to_string(s.port) + " " +
                       shell_quoted(certificate().cert.string()));
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("tls_python_client: all checks passed") != std::string::npos);
}

TEST_CASE("TLS: plain HTTP to the TLS port is not served, and TLS clients still are") {
  served_engine s(tls_config());
  auto plain = http_call(s.port, http::verb::get, "/health");
  CHECK(plain.status == 0); // the handshake fails: no HTTP answer
  // A plain client that sends nothing and one that sends garbage do not hold the server up either.
  asio::io_context ioc;
  tcp::socket silent(ioc);
  silent.connect(local_endpoint(s.port));
  tls_client client;
  auto ok = client.call(s.port, http::verb::post, "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":4})");
  CHECK(ok.status == 200);
  CHECK(http_call(s.port, http::verb::post, "/v1/completions", R"({"prompt":"x"})").status == 0);
  CHECK(client.call(s.port, http::verb::get, "/health").status == 200);
}

TEST_CASE("TLS files: missing, garbage or mismatched certificates and keys are refused with the key, file and reason") {
  const auto& c = certificate();
  temp_dir dir;
  const auto garbage = dir.write("garbage.pem", "this is not a certificate\n");
  const auto missing = (dir.path / "missing.pem").string();

  CHECK_NOTHROW(net::make_tls_context({c.cert.string(), c.key.string()}));
  CHECK_THROWS_WITH_AS(net::make_tls_context({c.cert.string(), ""}),
                       doctest::Contains("server.tls-cert and server.tls-key must be set together"), net::tls_error);
  const std::string missing_cert = "cannot read server.tls-cert '" + missing + "': No such file or directory";
  CHECK_THROWS_WITH_AS(net::make_tls_context({missing, c.key.string()}), doctest::Contains(missing_cert.c_str()),
                       net::tls_error);
  const std::string missing_key = "cannot read server.tls-key '" + missing + "'";
  CHECK_THROWS_WITH_AS(net::make_tls_context({c.cert.string(), missing}), doctest::Contains(missing_key.c_str()),
                       net::tls_error);
  try {
    net::make_tls_context({garbage.string(), c.key.string()});
    FAIL("a garbage certificate was accepted");
  } catch (const net::tls_error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("server.tls-cert '" + garbage.string() + "'") != std::string::npos);
    CHECK(what.find("no start line") != std::string::npos); // OpenSSL's reason
  }
  try {
    net::make_tls_context({c.cert.string(), garbage.string()});
    FAIL("a garbage key was accepted");
  } catch (const net::tls_error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("server.tls-key '" + garbage.string() + "'") != std::string::npos);
  }
  try {
    net::make_tls_context({c.cert.string(), c.other_key.string()});
    FAIL("a key of another certificate was accepted");
  } catch (const net::tls_error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("server.tls-key '" + c.other_key.string() + "'") != std::string::npos);
    CHECK(what.find("server.tls-cert '" + c.cert.string() + "'") != std::string::npos);
    CHECK(what.find("mismatch") != std::string::npos); // OpenSSL: "key values mismatch"
  }
}

TEST_CASE("TLS files: troupe-serve exits with 1 and says which file is wrong and why") {
  const auto& c = certificate();
  temp_dir dir;
  const auto garbage = dir.write("garbage.pem", "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n");
  auto serve = [&](const std::string& cert, const std::string& key) {
    return run_command("cd " + shell_quoted(data_root().string()) + " && timeout 60 " +
                       shell_quoted((bin_dir() / "troupe-serve").string()) +
                       " --config-file=configs/stories260k-cpu.ini --server.port=0 --server.tls-cert=" +
                       shell_quoted(cert) + " --server.tls-key=" + shell_quoted(key) + " </dev/null");
  };
  auto bad_cert = serve(garbage.string(), c.key.string());
  INFO(bad_cert.output);
  CHECK(bad_cert.exit_code == 1);
  CHECK(bad_cert.output.find("troupe-serve: server.tls-cert '" + garbage.string() + "'") != std::string::npos);
  CHECK(bad_cert.output.find("listening on") == std::string::npos);
  auto wrong_key = serve(c.cert.string(), c.other_key.string());
  INFO(wrong_key.output);
  CHECK(wrong_key.exit_code == 1);
  CHECK(wrong_key.output.find("server.tls-key '" + c.other_key.string() + "' does not belong to") != std::string::npos);
  auto no_file = serve((dir.path / "nope.pem").string(), c.key.string());
  CHECK(no_file.exit_code == 1);
  CHECK(no_file.output.find("cannot read server.tls-cert") != std::string::npos);
}

TEST_CASE("TLS files: the server refuses to start on a bad certificate") {
  temp_dir dir;
  net::server_config cfg;
  cfg.tls = {dir.write("cert.pem", "junk").string(), certificate().key.string()};
  CHECK_THROWS_AS(served_engine{cfg}, net::tls_error);
}
