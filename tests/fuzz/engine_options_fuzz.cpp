// Fuzzes the INI options path (actors/engine_system_config.cpp: engine_system_config::load with
// --config-file, i.e. CAF's INI parser, troupe's check_settings and validate) on any bytes
// as the file: load either throws config_error, which the apps report, or yields an
// engine_config that validate() accepts. Anything else would end the app uncaught.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "fuzz_support.hpp"
#include "troupe/engine_system_config.hpp"

namespace {

// One file per process (libFuzzer's -fork and -jobs run several), rewritten per input
// and removed at exit.
struct temp_ini {
  std::string path =
      (std::filesystem::temp_directory_path() / ("troupe_fuzz_" + std::to_string(::getpid()) + ".ini")).string();
  ~temp_ini() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

const std::string& ini_path() {
  static const temp_ini file;
  return file.path;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  {
    std::ofstream out(ini_path(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  troupe::engine_system_config cfg;
  try {
    if (!cfg.load({"--config-file=" + ini_path()}))
      return 0;
  } catch (const troupe::config_error&) {
    return 0;
  }
  try {
    troupe::validate(cfg.engine);
  } catch (const std::exception& e) {
    troupe::fuzz::check(false, "a loaded config fails validate()", e.what());
  }
  return 0;
}
