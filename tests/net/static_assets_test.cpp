// The playground's embedded files: "/" is the page, each file is served with its
// content type and exact bytes, and no other path (traversal, encoded dots, case,
// doubled slashes, a NUL) finds anything. Also the /playground/config body.
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "net/playground_config.hpp"
#include "net/static_assets.hpp"
#include "tests/support/data_root.hpp"

using namespace troupe;
using namespace troupe::net;

namespace {
std::string source_file(const std::string& relative) {
  std::ifstream in(troupe::testing::data_root() / relative, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read " << relative);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}
} // namespace

TEST_CASE("the root serves the embedded index.html as HTML") {
  auto page = find_static_asset("/");
  REQUIRE(page);
  CHECK(page->content_type == "text/html; charset=utf-8");
  CHECK(page->body == source_file("net/playground/index.html"));
  auto same = find_static_asset("/index.html");
  REQUIRE(same);
  CHECK(same->body.data() == page->body.data());
  auto with_query = find_static_asset("/?reload=1");
  REQUIRE(with_query);
  CHECK(with_query->body.data() == page->body.data());
}

TEST_CASE("every file of net/playground is embedded byte for byte with its content type") {
  REQUIRE(playground_files().size() >= 3); // index.html, app.js, style.css at least
  for (const auto& f : playground_files()) {
    CAPTURE(f.path);
    auto asset = find_static_asset(f.path);
    REQUIRE(asset);
    CHECK(asset->body == source_file("net/playground" + std::string(f.path)));
    CHECK(asset->content_type != "application/octet-stream");
  }
  CHECK(find_static_asset("/app.js").value().content_type == "text/javascript; charset=utf-8");
  CHECK(find_static_asset("/style.css").value().content_type == "text/css; charset=utf-8");
}

TEST_CASE("paths outside the embedded table are not found") {
  const std::string_view outside[] = {"",
                                      "index.html",
                                      "/../index.html",
                                      "/..",
                                      "/../",
                                      "/%2e%2e/index.html",
                                      "/%2E%2E/",
                                      "/.%2e/app.js",
                                      "/%2e%2e%2fapp.js",
                                      "/..%2fetc/passwd",
                                      "/../../etc/passwd",
                                      "//index.html",
                                      "/./index.html",
                                      "/index.html/",
                                      "/index.html/..",
                                      "/INDEX.HTML",
                                      "/app.js%00",
                                      "/app.js.map",
                                      "/playground/app.js",
                                      "/favicon.ico",
                                      "/%2f",
                                      "/\\index.html",
                                      "/index.html#x"};
  for (auto target : outside) {
    CAPTURE(target);
    CHECK_FALSE(find_static_asset(target));
  }
  // A NUL inside the path does not end it.
  CHECK_FALSE(find_static_asset(std::string_view("/app.js\0.png", 12)));
}

TEST_CASE("the lookup only ever returns entries of the table it is given") {
  const embedded_file table[] = {{"/a.css", "a{}"}, {"/b.bin", "\x01\x02"}};
  auto a = find_static_asset(table, "/a.css");
  REQUIRE(a);
  CHECK(a->body == "a{}");
  CHECK(a->content_type == "text/css; charset=utf-8");
  auto b = find_static_asset(table, "/b.bin");
  REQUIRE(b);
  CHECK(b->content_type == "application/octet-stream");
  CHECK_FALSE(find_static_asset(table, "/")); // no index.html in this table
  CHECK_FALSE(find_static_asset(table, "/../a.css"));
}

TEST_CASE("content types follow the extension") {
  CHECK(content_type_for("/x.html") == "text/html; charset=utf-8");
  CHECK(content_type_for("/x.js") == "text/javascript; charset=utf-8");
  CHECK(content_type_for("/x.json") == "application/json");
  CHECK(content_type_for("/x.svg") == "image/svg+xml");
  CHECK(content_type_for("/x.png") == "image/png");
  CHECK(content_type_for("/x") == "application/octet-stream");
}

TEST_CASE("the playground config carries the model and the request limits") {
  model_info info{"stories260k", 512, 512, "plain"};
  request_limits limits;
  limits.max_tokens_limit = 300;
  limits.max_stop_strings = 5;
  auto v = boost::json::parse(playground_config(info, limits));
  REQUIRE(v.is_object());
  const auto& o = v.as_object();
  CHECK(o.at("model").as_string() == "stories260k");
  CHECK(o.at("chat_format").as_string() == "plain");
  CHECK(o.at("max_model_len").to_number<int>() == 512);
  CHECK(o.at("max_tokens_limit").to_number<int>() == 300);
  CHECK(o.at("max_stop_strings").to_number<int>() == 5);
  CHECK(o.at("max_stop_length").to_number<int>() == 256);
  CHECK(o.at("temperature_max").to_number<double>() == 2.0);
}
