// troupe-bench's sweep: the list of points parses (integers >= 1 for concurrency, numbers > 0
// or inf for rates) and a bad one is refused with its reason; the table, the CSV and the JSON
// rows hold one row a point with the columns from each point's metrics.
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/troupe-bench/load/sweep.hpp"

using namespace troupe::bench;

namespace {

std::string refusal(std::string_view text, sweep_kind kind) {
  try {
    parse_sweep_list(text, kind);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

sweep_point point(double value, double scale, std::size_t failed = 0, std::optional<double> goodput = {}) {
  sweep_point p;
  p.value = value;
  auto& m = p.metrics;
  m.completed = 4;
  m.failed = failed;
  m.output_throughput = 100 * scale;
  m.total_token_throughput = 150 * scale;
  m.request_throughput = 2 * scale;
  m.ttft.median_ms = 10 * scale;
  m.ttft.p99_ms = 20 * scale;
  m.tpot.median_ms = 3 * scale;
  m.tpot.p99_ms = 4 * scale;
  m.itl.p99_ms = 5 * scale;
  m.request_goodput = goodput;
  return p;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    out.push_back(l);
  return out;
}

} // namespace

TEST_CASE("a sweep's list of concurrencies parses in the order given") {
  CHECK(parse_sweep_list("1,4,16,64", sweep_kind::concurrency) == std::vector<double>{1, 4, 16, 64});
  CHECK(parse_sweep_list("8", sweep_kind::concurrency) == std::vector<double>{8});
  CHECK(parse_sweep_list("4,1", sweep_kind::concurrency) == std::vector<double>{4, 1});
}

TEST_CASE("a sweep's list of rates takes fractions and inf") {
  auto r = parse_sweep_list("0.5,2,inf", sweep_kind::rate);
  REQUIRE(r.size() == 3);
  CHECK(r[0] == 0.5);
  CHECK(r[1] == 2);
  CHECK(std::isinf(r[2]));
}

TEST_CASE("a bad sweep list is refused with its reason") {
  CHECK(refusal("", sweep_kind::concurrency).find("needs a list") != std::string::npos);
  CHECK(refusal("1,,4", sweep_kind::concurrency).find("empty item") != std::string::npos);
  CHECK(refusal("1,4,", sweep_kind::concurrency).find("empty item") != std::string::npos);
  CHECK(refusal("0,4", sweep_kind::concurrency).find("'0' is not an integer >= 1") != std::string::npos);
  CHECK(refusal("-2", sweep_kind::concurrency).find("not an integer >= 1") != std::string::npos);
  CHECK(refusal("1.5", sweep_kind::concurrency).find("not an integer >= 1") != std::string::npos);
  CHECK(refusal("inf", sweep_kind::concurrency).find("'inf' is not a number") != std::string::npos);
  CHECK(refusal("1,four", sweep_kind::concurrency).find("'four' is not a number") != std::string::npos);
  CHECK(refusal("4x", sweep_kind::concurrency).find("not a number") != std::string::npos);
  CHECK(refusal("1,4,1", sweep_kind::concurrency).find("1 is given twice") != std::string::npos);
  CHECK(refusal("0", sweep_kind::rate).find("not > 0") != std::string::npos);
  CHECK(refusal("-1", sweep_kind::rate).find("not > 0") != std::string::npos);
  CHECK(refusal("nan", sweep_kind::rate).find("not a number") != std::string::npos);
  CHECK(refusal("inf,2,inf", sweep_kind::rate).find("inf is given twice") != std::string::npos);
  CHECK(refusal("1,2", sweep_kind::rate).empty());
  CHECK(refusal("0", sweep_kind::concurrency).find("--sweep-concurrency") != std::string::npos);
  CHECK(refusal("0", sweep_kind::rate).find("--sweep-rate") != std::string::npos);
}

TEST_CASE("the sweep table has a row a point with its metrics") {
  std::vector<sweep_point> points{point(1, 1), point(16, 10, 2)};
  std::ostringstream out;
  print_sweep_table(out, sweep_kind::concurrency, points);
  const auto l = lines(out.str());
  CAPTURE(out.str());
  REQUIRE(l.size() == 6); // title, header, units, two rows, rule
  CHECK(l[0].find("Sweep over concurrency") != std::string::npos);
  for (const char* header : {"concurrency", "out tok/s", "total tok/s", "req/s", "TTFT P50", "TTFT P99", "TPOT P50",
                             "TPOT P99", "ITL P99", "failed"})
    CHECK(l[1].find(header) != std::string::npos);
  CHECK(l[1].find("goodput") == std::string::npos); // no SLOs given
  CHECK(l[2].find("(ms)") != std::string::npos);
  CHECK(l[3] ==
        "1                  100.0       150.0        2.00       10.00       20.00        3.00        4.00"
        "        5.00       0");
  CHECK(l[4] ==
        "16                1000.0      1500.0       20.00      100.00      200.00       30.00       40.00"
        "       50.00       2");
  // Every row lines up with the header.
  CHECK(l[3].size() == l[1].size());
  CHECK(l[4].size() == l[1].size());
}

TEST_CASE("the sweep table shows goodput when SLOs were given, and rates with inf") {
  std::vector<sweep_point> points{point(0.5, 1, 0, 1.5), point(INFINITY, 2, 0, 3.25)};
  std::ostringstream out;
  print_sweep_table(out, sweep_kind::rate, points);
  const auto l = lines(out.str());
  CAPTURE(out.str());
  REQUIRE(l.size() == 6);
  CHECK(l[1].find("rate (req/s)") != std::string::npos);
  CHECK(l[1].find("goodput") != std::string::npos);
  CHECK(l[3].starts_with("0.5 "));
  CHECK(l[3].find(" 1.50       0") != std::string::npos);
  CHECK(l[4].starts_with("inf "));
  CHECK(l[4].find(" 3.25       0") != std::string::npos);
}

TEST_CASE("the sweep's CSV and JSON rows hold the table's columns") {
  std::vector<sweep_point> points{point(1, 1), point(2, 2, 1)};
  std::ostringstream csv;
  write_sweep_csv(csv, sweep_kind::concurrency, points);
  const auto l = lines(csv.str());
  REQUIRE(l.size() == 3);
  CHECK(l[0] ==
        "concurrency,output_throughput,total_token_throughput,request_throughput,ttft_p50_ms,ttft_p99_ms,"
        "tpot_p50_ms,tpot_p99_ms,itl_p99_ms,failed");
  CHECK(l[1] == "1,100.000,150.000,2.000,10.000,20.000,3.000,4.000,5.000,0");
  CHECK(l[2] == "2,200.000,300.000,4.000,20.000,40.000,6.000,8.000,10.000,1");

  auto rows = sweep_table_json(sweep_kind::concurrency, points);
  REQUIRE(rows.size() == 2);
  const auto& second = rows[1].as_object();
  CHECK(second.at("concurrency").to_number<int>() == 2);
  CHECK(second.at("output_throughput").to_number<double>() == 200);
  CHECK(second.at("ttft_p99_ms").to_number<double>() == 40);
  CHECK(second.at("itl_p99_ms").to_number<double>() == 10);
  CHECK(second.at("failed").to_number<int>() == 1);
  CHECK(second.at("completed").to_number<int>() == 4);
  CHECK(second.at("request_goodput").is_null());

  auto rate_rows = sweep_table_json(sweep_kind::rate, std::vector<sweep_point>{point(INFINITY, 1, 0, 2.0)});
  CHECK(rate_rows[0].at("rate").as_string() == "inf");
  CHECK(rate_rows[0].at("request_goodput").to_number<double>() == 2);
}
