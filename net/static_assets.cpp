// Lookup of embedded files by exact path, with their content types.
#include "net/static_assets.hpp"

#include <array>
#include <utility>

namespace troupe::net {

std::string_view content_type_for(std::string_view path) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 7> types{{
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".json", "application/json"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".ico", "image/x-icon"},
  }};
  for (const auto& [ext, type] : types)
    if (path.ends_with(ext))
      return type;
  return "application/octet-stream";
}

std::optional<static_asset> find_static_asset(std::span<const embedded_file> files, std::string_view target) {
  auto path = target.substr(0, target.find('?'));
  if (path == "/")
    path = "/index.html";
  for (const auto& f : files)
    if (f.path == path)
      return static_asset{content_type_for(f.path), f.bytes};
  return std::nullopt;
}

} // namespace troupe::net
