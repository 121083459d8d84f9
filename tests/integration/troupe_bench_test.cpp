// Runs the built troupe-bench against a troupe-serve of its own (both land next to
// this test in bin/): over WebSocket, shared WebSocket connections and SSE, every
// request completes with exactly its output length and the metrics in the JSON agree
// with each other; an unreachable server exits 1 and bad usage 2.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "tests/support/stories_model.hpp"
#include "tests/support/temp_dir.hpp"

namespace fs = std::filesystem;
using namespace troupe::testing;

namespace {

fs::path bin_dir() {
  return fs::read_symlink("/proc/self/exe").parent_path();
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s)
    q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// troupe-serve on the bundled model with an ephemeral port, stopped with SIGTERM at scope exit.
struct served {
  temp_dir dir{"troupe_bench_test"};
  fs::path log = dir.path / "serve.log";
  pid_t pid = -1;
  int port = 0;

  served() {
    const auto serve = bin_dir() / "troupe-serve";
    REQUIRE(fs::exists(serve));
    const std::string root = data_root().string(); // found before the fork: the child only execs
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      // The config names the model relative to the repository root.
      if (::chdir(root.c_str()) != 0)
        ::_exit(126);
      ::execl(serve.c_str(), serve.c_str(), "--config-file=configs/stories260k-cpu.ini", "--server.port=0",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    static const std::regex listening(R"(listening on [0-9.]+:(\d+))");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (port == 0 && std::chrono::steady_clock::now() < deadline) {
      std::smatch m;
      auto text = read_text(log);
      if (std::regex_search(text, m, listening)) {
        port = std::stoi(m[1]);
        break;
      }
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        FAIL("troupe-serve exited at start:\n" << text);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (port == 0) {
      stop();
      FAIL("no 'listening on' line within 60 s:\n" << read_text(log));
    }
  }

  ~served() { stop(); }

  void stop() {
    if (pid <= 0)
      return;
    const pid_t child = std::exchange(pid, -1);
    ::kill(child, SIGTERM);
    for (int i = 0; i < 200; ++i) { // 20 s
      if (::waitpid(child, nullptr, WNOHANG) == child)
        return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  }
};

struct bench_run {
  int exit_code = -1;
  std::string out; // stdout and stderr
};

bench_run run_bench(const std::string& args) {
  const auto command = "timeout 240 " + quoted((bin_dir() / "troupe-bench").string()) + " " + args + " 2>&1";
  bench_run r;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0)
    r.out.append(buf, n);
  int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

double number(const boost::json::object& o, const char* key) {
  return o.at(key).to_number<double>();
}

// 8 prompts of 32 tokens, 16 output tokens each, at most 4 in flight.
boost::json::object bench_json(const served& s, const std::string& url_and_transport) {
  const auto result = s.dir.path / "result.json";
  auto r = run_bench(url_and_transport +
                     " --num-prompts 8 --max-concurrency 4 --input-len 32 --output-len 16 --label it"
                     " --result-json " +
                     quoted(result.string()));
  INFO(r.out);
  INFO(read_text(s.log));
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("Serving Benchmark Result") != std::string::npos);
  return boost::json::parse(read_text(result)).as_object();
}

void check_results(const boost::json::object& j) {
  CAPTURE(boost::json::serialize(j.at("errors")));
  CHECK(number(j, "completed") == 8);
  CHECK(number(j, "failed") == 0);
  CHECK(number(j, "total_output_tokens") == 8 * 16);
  // 32 words of one token each, and the BOS the server adds.
  CHECK(number(j, "total_input_tokens") == 8 * 33);
  for (const auto& len : j.at("output_lens").as_array())
    CHECK(len.to_number<int>() == 16);
  CHECK(number(j, "duration") > 0);
  CHECK(number(j, "mean_ttft_ms") > 0);
  CHECK(number(j, "median_itl_ms") > 0);
  CHECK(number(j, "p99_e2el_ms") >= number(j, "median_e2el_ms"));
  // Every request has 16 tokens, so mean TPOT = (mean E2E - mean TTFT) / 15 exactly.
  const double expected_tpot = (number(j, "mean_e2el_ms") - number(j, "mean_ttft_ms")) / 15;
  CHECK(number(j, "mean_tpot_ms") == doctest::Approx(expected_tpot).epsilon(1e-9));
  CHECK(number(j, "mean_tpot_ms") > 0);
  // The chunks of a request span at most its time after the first token.
  CHECK(number(j, "mean_itl_ms") <= number(j, "mean_e2el_ms"));
  CHECK(number(j, "output_throughput") == doctest::Approx(128 / number(j, "duration")));
  CHECK(number(j, "request_throughput") == doctest::Approx(8 / number(j, "duration")));
  CHECK(j.at("label").as_string() == "it");
  CHECK(j.at("options").at("max_concurrency").to_number<int>() == 4);
}

} // namespace

TEST_CASE("troupe-bench over WebSocket completes every request with its output length") {
  served s;
  auto j = bench_json(s, "--url ws://127.0.0.1:" + std::to_string(s.port) + "/v1/stream");
  check_results(j);
  CHECK(j.at("transport").as_string() == "ws");
}

TEST_CASE("troupe-bench over shared WebSocket connections multiplexes the requests") {
  served s;
  auto j = bench_json(s, "--url ws://127.0.0.1:" + std::to_string(s.port) + "/v1/stream --ws-connections 2");
  check_results(j);
}

TEST_CASE("troupe-bench over SSE completes every request with its output length") {
  served s;
  auto j = bench_json(s, "--url http://127.0.0.1:" + std::to_string(s.port) + " --transport sse");
  check_results(j);
  CHECK(j.at("transport").as_string() == "sse");
}

TEST_CASE("troupe-bench sweeps concurrencies with the same workload and prints a row a point") {
  served s;
  const auto result = s.dir.path / "sweep.json";
  const auto csv = s.dir.path / "sweep.csv";
  auto r = run_bench("--url http://127.0.0.1:" + std::to_string(s.port) +
                     " --num-prompts 4 --input-len 8 --output-len 8 --sweep-concurrency 1,2 --goodput ttft:60000"
                     " --result-json " +
                     quoted(result.string()) + " --sweep-csv " + quoted(csv.string()));
  INFO(r.out);
  INFO(read_text(s.log));
  REQUIRE(r.exit_code == 0);
  const auto table = r.out.find("Sweep over concurrency");
  REQUIRE(table != std::string::npos);
  const auto rows = r.out.substr(table);
  CHECK(rows.find("\n1 ") != std::string::npos);
  CHECK(rows.find("\n2 ") != std::string::npos);
  CHECK(rows.find("goodput") != std::string::npos);

  const auto j = boost::json::parse(read_text(result)).as_object();
  CHECK(j.at("sweep").as_string() == "concurrency");
  const auto& t = j.at("table").as_array();
  REQUIRE(t.size() == 2);
  const auto& points = j.at("points").as_array();
  REQUIRE(points.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& row = t[i].as_object();
    const auto& point = points[i].as_object();
    CHECK(number(row, "concurrency") == static_cast<double>(i + 1));
    CHECK(number(row, "failed") == 0);
    CHECK(number(row, "completed") == 4);
    CHECK(number(row, "output_throughput") > 0);
    CHECK(number(row, "request_goodput") == doctest::Approx(number(row, "request_throughput")));
    CHECK(number(point, "failed") == 0);
    CHECK(number(point, "total_output_tokens") == 4 * 8);
    CHECK(number(point, "total_input_tokens") == 4 * 9); // 8 prompt tokens and BOS
    CHECK(point.at("options").at("max_concurrency").to_number<int>() == static_cast<int>(i + 1));
    CHECK(number(point, "p99_ttft_ms") == doctest::Approx(number(row, "ttft_p99_ms")));
  }
  // The same prompts at each point.
  CHECK(points[0].at("input_lens") == points[1].at("input_lens"));
  const auto csv_text = read_text(csv);
  CHECK(csv_text.starts_with("concurrency,output_throughput,"));
  CHECK(std::count(csv_text.begin(), csv_text.end(), '\n') == 3);
}

TEST_CASE("troupe-bench counts requests the server refuses as failures, not as a crash") {
  served s;
  // 600 prompt tokens do not fit the model's 512-token context: every request fails.
  auto r = run_bench("--url http://127.0.0.1:" + std::to_string(s.port) +
                     " --num-prompts 3 --input-len 600 --output-len 4 --num-warmups 0");
  INFO(r.out);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("Failed requests:                         3") != std::string::npos);
}

TEST_CASE("troupe-bench exits 1 when the server cannot be reached and 2 on bad usage") {
  // Nothing listens on port 1.
  auto r = run_bench("--url ws://127.0.0.1:1/v1/stream --num-prompts 1");
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("cannot") != std::string::npos);
  r = run_bench("--transport carrier-pigeon");
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("usage") != std::string::npos);
  r = run_bench("--range-ratio 1.5");
  CHECK(r.exit_code == 2);
  r = run_bench("--goodput ttft");
  CHECK(r.exit_code == 2);
  for (const char* sweep :
       {"--sweep-concurrency=", "--sweep-concurrency 0,4", "--sweep-concurrency -1", "--sweep-concurrency 1,x",
        "--sweep-concurrency 2,2", "--sweep-rate 0", "--sweep-rate 1 --sweep-concurrency 1", "--sweep-csv x.csv"}) {
    r = run_bench(sweep);
    CAPTURE(sweep);
    CHECK(r.exit_code == 2);
    CHECK(r.out.starts_with("troupe-bench: --sweep-"));
  }
}
