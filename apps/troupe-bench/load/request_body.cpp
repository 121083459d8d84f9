// Builds request bodies; the sampling fields are the same on both transports.
#include "apps/troupe-bench/load/request_body.hpp"

#include <boost/json.hpp>

namespace troupe::bench {

namespace {
boost::json::object shared_fields(const bench_request& r, const sampling_settings& s) {
  boost::json::object body;
  body["prompt"] = r.prompt;
  body["max_tokens"] = r.max_tokens;
  body["temperature"] = s.temperature;
  body["ignore_eos"] = true;
  body["stream"] = true;
  if (r.has_priority)
    body["priority"] = r.priority;
  // Greedy decoding needs no seed; sampled runs stay reproducible with one per request.
  if (s.temperature > 0)
    body["seed"] = s.seed + r.index;
  return body;
}
} // namespace

std::string ws_generate_frame(const bench_request& request, const sampling_settings& sampling) {
  auto body = shared_fields(request, sampling);
  body["type"] = "generate";
  body["id"] = request.index;
  return boost::json::serialize(body);
}

std::string completions_body(const bench_request& request, const sampling_settings& sampling) {
  auto body = shared_fields(request, sampling);
  // The usage chunk gives the server's token counts, which the metrics use.
  body["stream_options"] = boost::json::object{{"include_usage", true}};
  return boost::json::serialize(body);
}

} // namespace troupe::bench
