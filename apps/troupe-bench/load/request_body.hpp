// The JSON a benchmark request sends: a WebSocket generate frame or an OpenAI
// /v1/completions body, both streaming with EOS ignored so outputs have the asked length.
#pragma once

#include <cstdint>
#include <string>

#include "apps/troupe-bench/load/workload.hpp"

namespace troupe::bench {

struct sampling_settings {
  double temperature = 0.0;
  std::uint64_t seed = 0; // with temperature > 0 request i samples with seed + i (reproducible runs)
};

// {"type":"generate","id":INDEX,"prompt","max_tokens","temperature","ignore_eos":true,"stream":true,
//  "priority"?, "seed"?}
std::string ws_generate_frame(const bench_request& request, const sampling_settings& sampling);

// {"prompt","max_tokens","temperature","ignore_eos":true,"stream":true,
//  "stream_options":{"include_usage":true},"priority"?,"seed"?}
std::string completions_body(const bench_request& request, const sampling_settings& sampling);

} // namespace troupe::bench
