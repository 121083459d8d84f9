// troupe-engine: loads the engine from an INI config (plus command-line overrides), as troupe-serve
// does, and publishes it on a loopback port through CAF's middleman instead of serving HTTP: a
// troupe-serve started with router.engines=["HOST:PORT"], or a host application calling
// troupe::connect_engine, then sends it requests as to an engine of its own. Runs until SIGINT or
// SIGTERM.
#include <caf/all.hpp>

#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "apps/stop_signals.hpp"
#include "troupe/engine.hpp"
#include "troupe/engine_system_config.hpp"
#include "troupe/remote_engine.hpp"

namespace {

struct engine_process_config : troupe::engine_system_config {
  std::string host = "127.0.0.1";
  int port = 7000;

  engine_process_config() {
    caf::config_option_adder{custom_options_, "engine-server"}
        .add(host, "host", "loopback address to publish the engine on (127.0.0.1, ::1 or localhost)")
        .add(port, "port", "TCP port; 0 = an ephemeral port (printed at start)");
    troupe::enable_remote_engines(*this);
  }
};

} // namespace

int main(int argc, char** argv) {
  const troupe::apps::stop_signals stop_signals; // before any thread starts

  engine_process_config cfg;
  try {
    if (!cfg.load(std::vector<std::string>(argv + 1, argv + argc)))
      return 0; // help printed
    if (cfg.port < 0 || cfg.port > 65535)
      throw troupe::config_error("invalid value for engine-server.port: '" + std::to_string(cfg.port) +
                                 "' (allowed: 0..65535)");
    troupe::check_publish_address(cfg.host);
  } catch (const troupe::config_error& e) {
    std::cerr << "troupe-engine: " << e.what() << "\n";
    return 1;
  }
  caf::actor_system sys{cfg};
  troupe::engine_actor engine;
  int status = 0;
  try {
    engine = troupe::spawn_engine(sys, cfg.engine);
    const auto port = troupe::publish_engine(sys, engine, cfg.host, static_cast<std::uint16_t>(cfg.port));
    std::printf("engine published on %s:%u\n", cfg.host.c_str(), static_cast<unsigned>(port));
    std::printf("serve it: build/bin/troupe-serve --router.engines='[\"%s:%u\"]'\n", cfg.host.c_str(),
                static_cast<unsigned>(port));
    std::fflush(stdout);
    const int sig = stop_signals.wait();
    std::fprintf(stderr, "troupe-engine: signal %d, shutting down\n", sig);
  } catch (const std::exception& e) {
    std::cerr << "troupe-engine: " << e.what() << "\n";
    status = 1;
  }
  if (engine)
    caf::anon_send_exit(engine, caf::exit_reason::user_shutdown);
  return status;
}
