// engine_system_config: an actor_system_config that declares the engine's
// options and loads them strictly (no default INI file, unknown keys and
// wrong types rejected), for the apps, their tests and any host that wants it.
#pragma once

#include <caf/actor_system_config.hpp>

#include <string>
#include <vector>

#include "troupe/engine_config.hpp"

namespace troupe {

struct engine_system_config : caf::actor_system_config {
  engine_config engine;  // bound to the options: filled by load()

  engine_system_config();

  // Parses CAF-style arguments (argv without argv[0]): --config-file=FILE,
  // overrides --model.KEY=VALUE, --engine.KEY=VALUE, --speculative.KEY=VALUE
  // (a bool key alone means true), and CAF's own options (--scheduler.max-threads=2,
  // --long-help, --dump-config). Precedence: defaults < file < command line.
  // Only --config-file names a file: CAF's default caf-application.ini is never
  // read. Relative paths in values (model.path) are relative to the current
  // directory. Throws config_error for an unreadable file, an unknown key or
  // category, a wrong-typed or invalid value (validate()), or an argument CAF
  // refuses. Returns false when CAF printed help or the config instead
  // (--long-help, --dump-config): the program should then exit.
  bool load(std::vector<std::string> args);

  // Is `arg` an override of the engine's categories (--engine.block-size=32)?
  static bool is_engine_override(const std::string& arg);
};

} // namespace troupe
