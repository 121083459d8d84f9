// Parses a sweep's list of points and formats its table.
#include "apps/troupe-bench/load/sweep.hpp"

#include <boost/json.hpp>

#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

namespace troupe::bench {

namespace {

std::string option_name(sweep_kind kind) {
  return kind == sweep_kind::concurrency ? "--sweep-concurrency" : "--sweep-rate";
}

double parse_item(std::string_view item, sweep_kind kind) {
  const std::string text(item);
  const std::string where = option_name(kind) + ": ";
  if (text.empty())
    throw std::invalid_argument(where + "an empty item in the list");
  if (kind == sweep_kind::rate && text == "inf")
    return std::numeric_limits<double>::infinity();
  double x = 0;
  std::size_t used = 0;
  try {
    x = std::stod(text, &used);
  } catch (const std::logic_error&) {
    used = 0;
  }
  if (used != text.size() || std::isnan(x) || std::isinf(x))
    throw std::invalid_argument(where + "'" + text + "' is not a number");
  if (kind == sweep_kind::concurrency) {
    if (x != std::floor(x) || x < 1 || x > std::numeric_limits<int>::max())
      throw std::invalid_argument(where + "'" + text + "' is not an integer >= 1");
  } else if (!(x > 0)) {
    throw std::invalid_argument(where + "'" + text + "' is not > 0");
  }
  return x;
}

std::string value_text(sweep_kind kind, double value) {
  if (std::isinf(value))
    return "inf";
  char buf[32];
  if (kind == sweep_kind::concurrency)
    std::snprintf(buf, sizeof buf, "%.0f", value);
  else
    std::snprintf(buf, sizeof buf, "%g", value);
  return buf;
}

struct column {
  const char* header;
  const char* json;
  double (*get)(const serving_metrics&);
  int decimals;
};

constexpr column columns[] = {
    {"out tok/s", "output_throughput", [](const serving_metrics& m) { return m.output_throughput; }, 1},
    {"total tok/s", "total_token_throughput", [](const serving_metrics& m) { return m.total_token_throughput; }, 1},
    {"req/s", "request_throughput", [](const serving_metrics& m) { return m.request_throughput; }, 2},
    {"TTFT P50", "ttft_p50_ms", [](const serving_metrics& m) { return m.ttft.median_ms; }, 2},
    {"TTFT P99", "ttft_p99_ms", [](const serving_metrics& m) { return m.ttft.p99_ms; }, 2},
    {"TPOT P50", "tpot_p50_ms", [](const serving_metrics& m) { return m.tpot.median_ms; }, 2},
    {"TPOT P99", "tpot_p99_ms", [](const serving_metrics& m) { return m.tpot.p99_ms; }, 2},
    {"ITL P99", "itl_p99_ms", [](const serving_metrics& m) { return m.itl.p99_ms; }, 2},
};

bool has_goodput(std::span<const sweep_point> points) {
  for (const auto& p : points)
    if (p.metrics.request_goodput)
      return true;
  return false;
}

std::string fixed(double x, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return buf;
}

} // namespace

std::string_view to_string(sweep_kind kind) {
  return kind == sweep_kind::concurrency ? "concurrency" : "rate";
}

std::vector<double> parse_sweep_list(std::string_view text, sweep_kind kind) {
  if (text.empty())
    throw std::invalid_argument(option_name(kind) + " needs a list of points, e.g. 1,4,16");
  std::vector<double> values;
  for (;;) {
    const auto comma = text.find(',');
    const double x = parse_item(text.substr(0, comma), kind);
    for (double seen : values)
      if (seen == x)
        throw std::invalid_argument(option_name(kind) + ": " + value_text(kind, x) + " is given twice");
    values.push_back(x);
    if (comma == std::string_view::npos)
      break;
    text.remove_prefix(comma + 1);
  }
  return values;
}

void print_sweep_table(std::ostream& out, sweep_kind kind, std::span<const sweep_point> points) {
  const bool goodput = has_goodput(points);
  const std::string first = kind == sweep_kind::concurrency ? "concurrency" : "rate (req/s)";
  char buf[64];
  std::string header, units;
  std::snprintf(buf, sizeof buf, "%-12s", first.c_str());
  header += buf;
  units += std::string(12, ' ');
  for (const auto& c : columns) {
    std::snprintf(buf, sizeof buf, " %11s", c.header);
    header += buf;
    const bool ms = std::string_view(c.json).ends_with("_ms");
    std::snprintf(buf, sizeof buf, " %11s", ms ? "(ms)" : "");
    units += buf;
  }
  if (goodput) {
    std::snprintf(buf, sizeof buf, " %11s", "goodput");
    header += buf;
    std::snprintf(buf, sizeof buf, " %11s", "(req/s)");
    units += buf;
  }
  std::snprintf(buf, sizeof buf, " %7s", "failed");
  header += buf;
  units += std::string(8, ' ');
  while (!units.empty() && units.back() == ' ')
    units.pop_back();
  const std::string title = " Sweep over " + std::string(to_string(kind)) + " ";
  const std::size_t width = header.size();
  const std::size_t left = width > title.size() ? (width - title.size()) / 2 : 0;
  out << std::string(left, '=') << title
      << std::string(width > title.size() + left ? width - title.size() - left : 0, '=') << "\n";
  out << header << "\n" << units << "\n";
  for (const auto& p : points) {
    std::snprintf(buf, sizeof buf, "%-12s", value_text(kind, p.value).c_str());
    out << buf;
    for (const auto& c : columns) {
      std::snprintf(buf, sizeof buf, " %11.*f", c.decimals, c.get(p.metrics));
      out << buf;
    }
    if (goodput) {
      std::snprintf(buf, sizeof buf, " %11.2f", p.metrics.request_goodput.value_or(0));
      out << buf;
    }
    std::snprintf(buf, sizeof buf, " %7zu", p.metrics.failed);
    out << buf << "\n";
  }
  out << std::string(width, '=') << "\n";
}

void write_sweep_csv(std::ostream& out, sweep_kind kind, std::span<const sweep_point> points) {
  const bool goodput = has_goodput(points);
  out << to_string(kind);
  for (const auto& c : columns)
    out << "," << c.json;
  if (goodput)
    out << ",request_goodput";
  out << ",failed\n";
  for (const auto& p : points) {
    out << value_text(kind, p.value);
    for (const auto& c : columns)
      out << "," << fixed(c.get(p.metrics), 3);
    if (goodput)
      out << "," << fixed(p.metrics.request_goodput.value_or(0), 3);
    out << "," << p.metrics.failed << "\n";
  }
}

boost::json::array sweep_table_json(sweep_kind kind, std::span<const sweep_point> points) {
  boost::json::array rows;
  for (const auto& p : points) {
    boost::json::object row;
    if (std::isinf(p.value))
      row[to_string(kind)] = "inf";
    else if (kind == sweep_kind::concurrency)
      row[to_string(kind)] = static_cast<std::int64_t>(p.value);
    else
      row[to_string(kind)] = p.value;
    for (const auto& c : columns)
      row[c.json] = c.get(p.metrics);
    row["request_goodput"] = p.metrics.request_goodput ? boost::json::value(*p.metrics.request_goodput) : nullptr;
    row["completed"] = p.metrics.completed;
    row["failed"] = p.metrics.failed;
    rows.push_back(std::move(row));
  }
  return rows;
}

} // namespace troupe::bench
