// Parses --url; the path defaults to the endpoint the transport speaks to.
#include "apps/troupe-bench/load/endpoint.hpp"

#include <regex>
#include <stdexcept>

namespace troupe::bench {

endpoint parse_url(std::string_view url, std::optional<transport_kind> wanted) {
  static const std::regex pattern(R"((ws|http)://([^:/\s]+)(?::(\d+))?(/\S*)?)");
  std::match_results<std::string_view::const_iterator> m;
  if (!std::regex_match(url.begin(), url.end(), m, pattern))
    throw std::invalid_argument("the URL must look like ws://HOST:PORT/v1/stream or http://HOST:PORT, got '" +
                                std::string(url) + "'");
  endpoint e;
  e.kind = m[1] == "ws" ? transport_kind::ws : transport_kind::sse;
  e.host = m[2];
  e.port = m[3].matched ? std::string(m[3]) : "80";
  std::string path = m[4].matched ? std::string(m[4]) : "";
  bool no_path = path.empty() || path == "/";
  if (wanted && *wanted != e.kind) {
    if (!no_path)
      throw std::invalid_argument("the URL '" + std::string(url) + "' names a " + std::string(to_string(e.kind)) +
                                  " endpoint but the transport is " + std::string(to_string(*wanted)));
    e.kind = *wanted;
  }
  if (no_path)
    path = e.kind == transport_kind::ws ? "/v1/stream" : "/v1/completions";
  e.path = path;
  return e;
}

std::string_view to_string(transport_kind kind) {
  return kind == transport_kind::ws ? "ws" : "sse";
}

} // namespace troupe::bench
