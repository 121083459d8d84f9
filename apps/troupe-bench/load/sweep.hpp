// A load sweep: the same workload run at several concurrencies or request rates in one
// invocation, and the table of one row per point that people read to pick a deployment.
#pragma once

#include <boost/json/array.hpp>

#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "apps/troupe-bench/load/serving_metrics.hpp"

namespace troupe::bench {

enum class sweep_kind { concurrency, rate };

// "concurrency" or "rate": the table's first column and the JSON's key.
std::string_view to_string(sweep_kind kind);

// "1,4,16,64" (concurrency: integers >= 1) or "1,2.5,inf" (rate: numbers > 0, inf for
// all at once). Throws std::invalid_argument naming the problem: an empty list or item,
// a non-number, a value out of range, or one given twice.
std::vector<double> parse_sweep_list(std::string_view text, sweep_kind kind);

struct sweep_point {
  double value = 0; // the concurrency or the rate of this point
  serving_metrics metrics;
};

// One row a point: output tok/s, total tok/s, req/s, TTFT P50/P99, TPOT P50/P99,
// ITL P99 (ms), goodput (req/s) when SLOs were given, failed requests.
void print_sweep_table(std::ostream& out, sweep_kind kind, std::span<const sweep_point> points);

// The same table as CSV with a header line, for gnuplot (set datafile separator ',') or a sheet.
void write_sweep_csv(std::ostream& out, sweep_kind kind, std::span<const sweep_point> points);

// The table's rows as JSON objects with the columns' names (ttft_p50_ms, ...).
boost::json::array sweep_table_json(sweep_kind kind, std::span<const sweep_point> points);

} // namespace troupe::bench
