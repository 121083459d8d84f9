// A program of bin/ run beside a test as a child process (troupe-engine for the remote-engine
// tests): started with its arguments, its stdout read line by line until the test finds what it
// waits for, killed (SIGKILL: a crash, as far as its peers can tell) or stopped (SIGTERM) on demand,
// and always reaped.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace troupe::testing {

class child_process {
 public:
  // Runs `program` with `args`; its stderr joins stdout.
  child_process(const std::string& program, const std::vector<std::string>& args) {
    int fds[2];
    if (::pipe(fds) != 0)
      throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    std::vector<char*> argv{const_cast<char*>(program.c_str())};
    for (const auto& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const int rc = ::posix_spawn(&pid_, program.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    if (rc != 0) {
      ::close(fds[0]);
      throw std::runtime_error("cannot start " + program);
    }
    out_ = ::fdopen(fds[0], "r");
  }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;
  ~child_process() {
    kill();
    if (out_)
      std::fclose(out_);
  }

  // Reads output lines until one matches `pattern` (returns its first group, or the whole line) or
  // the child's output ends; the lines read are kept in output().
  std::optional<std::string> wait_for_line(const std::string& pattern) {
    const std::regex re(pattern);
    char line[4096];
    while (out_ && std::fgets(line, sizeof line, out_)) {
      output_ += line;
      std::smatch m;
      const std::string text(line);
      if (std::regex_search(text, m, re))
        return m.size() > 1 ? m[1].str() : m[0].str();
    }
    return std::nullopt;
  }

  const std::string& output() const { return output_; }
  pid_t pid() const { return pid_; }

  // SIGKILL, then reaped; idempotent.
  void kill() { end(SIGKILL); }
  // SIGTERM, then reaped: returns the exit status (-1 when a signal ended it).
  int stop() { return end(SIGTERM); }

 private:
  int end(int signal) {
    if (pid_ <= 0)
      return status_;
    ::kill(pid_, signal);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return status_;
  }

  pid_t pid_ = -1;
  int status_ = -1;
  std::FILE* out_ = nullptr;
  std::string output_;
};

} // namespace troupe::testing
