// Runs the built troupe-generate binary (it lands next to this test in bin/):
// greedy output equals the golden text, a bad engine option is refused, and a
// config file is read.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/stories_model.hpp"

namespace fs = std::filesystem;
using namespace troupe::testing;

namespace {

struct run_result {
  int exit_code = -1;
  std::string out, err;
};

fs::path bin_dir() { return fs::read_symlink("/proc/self/exe").parent_path(); }

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s)
    q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs troupe-generate with `args` (already quoted); stdout through a pipe, stderr to a file.
run_result generate(const std::string& args) {
  const auto err_file =
      fs::temp_directory_path() / ("troupe-generate-test-" + std::to_string(::getpid()) + ".stderr");
  const auto command = quoted((bin_dir() / "troupe-generate").string()) + " " + args + " 2>" + quoted(err_file);
  run_result r;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0)
    r.out.append(buf, n);
  int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = read_file(err_file);
  fs::remove(err_file);
  return r;
}

std::string golden_text() {
  auto golden = read_json(stories_dir() / "golden_greedy.json");
  return std::string(golden.at("cases").as_array().at(0).at("generated_text").as_string());
}

const std::string greedy_args = "--prompt 'Once upon a time' --temperature 0 --max-tokens 64 --ignore-eos";

} // namespace

TEST_CASE("troupe-generate prints the golden greedy text through the engine") {
  auto r = generate("--model " + quoted(stories_dir().string()) + " " + greedy_args);
  CAPTURE(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out == golden_text() + "\n");
  CHECK(r.err.find("] ") != std::string::npos);
  CHECK(r.err.find("tokens/s") != std::string::npos);
  CHECK(r.err.find("[5 prompt + 64 generated tokens, finish_reason=length]") != std::string::npos);
}

TEST_CASE("troupe-generate refuses engine.block-size=3 naming the key") {
  auto r = generate("--model " + quoted(stories_dir().string()) + " " + greedy_args + " --engine.block-size=3");
  CHECK(r.exit_code == 1);
  CHECK(r.out.empty());
  CHECK(r.err.find("engine.block-size") != std::string::npos);
}

TEST_CASE("troupe-generate reads a config file") {
  const auto dir = fs::temp_directory_path() / ("troupe-generate-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto ini = dir / "generate.ini";
  std::ofstream(ini) << "[model]\npath=\"" << stories_dir().string() << "\"\n[engine]\nblock-size=32\ncpu-threads=1\n";
  auto r = generate("--config-file=" + quoted(ini.string()) + " " + greedy_args);
  CAPTURE(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out == golden_text() + "\n");
  CHECK(r.err.find("blocks of 32 tokens") != std::string::npos);  // the engine's log line
  CHECK(r.err.find("1 threads") != std::string::npos);

  std::ofstream(ini) << "[engine]\nblok-size=32\n";
  r = generate("--config-file=" + quoted(ini.string()) + " " + greedy_args);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("engine.blok-size") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("troupe-generate exits 2 on bad usage") {
  auto r = generate("--bogus");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("usage") != std::string::npos);
  r = generate("--max-tokens");
  CHECK(r.exit_code == 2);
}
