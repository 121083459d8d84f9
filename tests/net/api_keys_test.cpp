// API keys: only a listed key passes, in a Bearer header or alone; keys come
// from the list, a file and an environment value alike; and CORS allows only
// the listed origins, answering their preflight and refusing the others'.
#include <doctest/doctest.h>

#include <fstream>

#include "net/api_keys.hpp"
#include "net/cors.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe::net;

TEST_CASE("a listed key passes, any other and a malformed header do not") {
  api_keys keys({"sk-one", " sk-two "});
  CHECK(keys.required());
  CHECK(keys.accepts("sk-one"));
  CHECK(keys.accepts("sk-two"));  // trimmed when listed
  CHECK_FALSE(keys.accepts("sk-on"));
  CHECK_FALSE(keys.accepts("sk-one2"));
  CHECK_FALSE(keys.accepts(""));
  CHECK(keys.accepts_authorization("Bearer sk-one"));
  CHECK(keys.accepts_authorization("bearer   sk-two "));
  CHECK_FALSE(keys.accepts_authorization("Basic sk-one"));
  CHECK_FALSE(keys.accepts_authorization("sk-one"));
  CHECK_FALSE(keys.accepts_authorization("Bearer "));
  CHECK_FALSE(keys.accepts_authorization(""));
  api_keys none;
  CHECK_FALSE(none.required());
}

TEST_CASE("a key is found by its place in the list, which per-key limits count by") {
  api_keys keys({"sk-one", "sk-two"});
  CHECK(keys.find("sk-one") == 0u);
  CHECK(keys.find("sk-two") == 1u);
  CHECK_FALSE(keys.find("sk-three"));
  CHECK(keys.find_authorization("Bearer sk-two") == 1u);
  CHECK_FALSE(keys.find_authorization("Basic sk-two"));
}

TEST_CASE("keys are collected from the list, a file and an environment value") {
  troupe::testing::temp_dir dir;
  auto file = dir.path / "keys.txt";
  std::ofstream(file) << "# deployment keys\nsk-file-1\n\n  sk-file-2  \n";
  auto keys = collect_api_keys({"sk-listed", ""}, file.string(), " sk-env-1 ,sk-env-2,,");
  CHECK(keys == std::vector<std::string>{"sk-listed", "sk-file-1", "sk-file-2", "sk-env-1", "sk-env-2"});
  CHECK(collect_api_keys({}, "", nullptr).empty());
  CHECK_THROWS_WITH_AS(collect_api_keys({}, (dir.path / "missing").string(), nullptr),
                       doctest::Contains("api-keys-file"), std::runtime_error);
}

TEST_CASE("CORS allows the listed origins only and answers their preflight") {
  cors_policy off;
  CHECK_FALSE(off.enabled());
  CHECK(off.response_headers("https://a.example").empty());
  cors_policy cors({"https://a.example"});
  CHECK(cors.allows("https://a.example"));
  CHECK_FALSE(cors.allows("https://b.example"));
  CHECK_FALSE(cors.allows(""));
  CHECK(cors.response_headers("https://a.example") == "Access-Control-Allow-Origin: https://a.example\r\nVary: Origin\r\n");
  CHECK(cors.response_headers("https://b.example").empty());
  auto ok = cors.preflight_response("https://a.example", true);
  CHECK(ok.starts_with("HTTP/1.1 204 No Content\r\n"));
  CHECK(ok.find("Access-Control-Allow-Headers: Authorization, Content-Type\r\n") != std::string::npos);
  auto refused = cors.preflight_response("https://b.example", true);
  CHECK(refused.starts_with("HTTP/1.1 403 Forbidden\r\n"));
  CHECK(refused.find("cors_origin_not_allowed") != std::string::npos);
  cors_policy any({"*"});
  CHECK(any.allows("https://whatever.example"));
}
