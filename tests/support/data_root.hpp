// Where the tests, GPU programs and fuzz targets find the repository's data (models/, tests/data/,
// configs/), looked up at run time so that a build copied elsewhere (the GPU machine) still finds it.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace troupe::testing {

// The data root: $TROUPE_DATA_DIR when set, else the nearest folder at or above the running
// binary's own (build/bin/x -> the checkout) that holds models/stories260k/config.json.
// Throws, naming every place it looked, when there is none.
inline std::filesystem::path find_data_root() {
  namespace fs = std::filesystem;
  const fs::path marker = fs::path("models") / "stories260k" / "config.json";
  std::error_code ec;
  if (const char* env = std::getenv("TROUPE_DATA_DIR"); env != nullptr && *env != '\0') {
    if (fs::is_regular_file(fs::path(env) / marker, ec))
      return fs::path(env);
    throw std::runtime_error("TROUPE_DATA_DIR=" + std::string(env) + " has no " + marker.string());
  }
  std::string looked;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec)
    looked = " (/proc/self/exe unreadable: " + ec.message() + ")";
  else
    for (fs::path dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
      if (fs::is_regular_file(dir / marker, ec))
        return dir;
      looked += "\n  " + (dir / marker).string();
      if (dir == dir.root_path())
        break;
    }
  throw std::runtime_error("test data not found (TROUPE_DATA_DIR is unset); looked at and above the binary for " +
                           marker.string() + ":" + looked);
}

inline const std::filesystem::path& data_root() {
  static const std::filesystem::path root = find_data_root();
  return root;
}

inline std::filesystem::path stories_dir() {
  return data_root() / "models" / "stories260k";
}

} // namespace troupe::testing
