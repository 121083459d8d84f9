// Runs a shell command from a test and keeps its exit code and output
// (stdout and stderr together), for tests that use other programs: openssl to
// make certificates, Python clients, troupe-serve itself.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace troupe::testing {

struct command_result {
  int exit_code = -1; // -1: killed by a signal, or could not run
  std::string output;
};

// `command` runs under /bin/sh; stderr joins stdout.
inline command_result run_command(const std::string& command) {
  command_result r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe)
    return r;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0)
    r.output.append(buf, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A string as one /bin/sh word.
inline std::string shell_quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s)
    q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The directory of the running test binary: the apps are built next to it, in bin/.
inline std::filesystem::path bin_dir() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path();
}

} // namespace troupe::testing
