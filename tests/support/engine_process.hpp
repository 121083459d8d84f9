// troupe-engine (bin/) serving the bundled model in a child process on an ephemeral loopback port, for
// the tests of engines in other processes, and the actor-system config that connects to it.
#pragma once

#include <doctest/doctest.h>

#include <caf/actor_system_config.hpp>

#include <cstdint>
#include <string>

#include "tests/support/child_process.hpp"
#include "tests/support/run_command.hpp"
#include "tests/support/stories_model.hpp"
#include "troupe/remote_engine.hpp"

namespace troupe::testing {

// cfg with the middleman and troupe's message types (enable_remote_engines), for `caf::actor_system sys{...}`.
inline caf::actor_system_config& remote_ready(caf::actor_system_config& cfg) {
  enable_remote_engines(cfg);
  return cfg;
}

struct engine_process {
  child_process process;
  std::uint16_t port = 0;
  std::string port_text; // as printed, for command lines

  engine_process()
      : process((bin_dir() / "troupe-engine").string(),
                {"--engine-server.port=0", "--model.path=" + stories_dir().string(), "--engine.cpu-threads=1"}) {
    const auto p = process.wait_for_line(R"(engine published on 127\.0\.0\.1:(\d+))");
    REQUIRE_MESSAGE(p, process.output());
    port_text = *p;
    port = static_cast<std::uint16_t>(std::stoi(port_text));
  }
};

} // namespace troupe::testing
