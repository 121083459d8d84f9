// engine_system_config::load: CAF's parse with the strictness it lacks. CAF
// drops unknown keys and wrong-typed values of an INI file silently, reads a
// stray caf-application.ini, and refuses --flag=false; here each of those is
// either an error naming the key or works as written.
#include "troupe/engine_system_config.hpp"

#include <caf/config_value.hpp>
#include <caf/settings.hpp>

#include <cstring>
#include <set>
#include <sstream>
#include <string_view>

namespace troupe {

namespace {

constexpr std::string_view config_file_flag = "--config-file";

bool has_prefix(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }

std::string str(caf::string_view s) { return std::string(s.begin(), s.end()); }

// The file given by --config-file=FILE; empty when there is none.
std::string config_file_of(const std::vector<std::string>& args) {
  std::string path;
  for (const auto& arg : args) {
    if (arg == config_file_flag || arg == std::string(config_file_flag) + "=")
      throw config_error("--config-file needs a file: --config-file=FILE");
    if (!has_prefix(arg, std::string(config_file_flag) + "="))
      continue;
    if (!path.empty())
      throw config_error("--config-file is given twice ('" + path + "' and '" +
                         arg.substr(config_file_flag.size() + 1) + "')");
    path = arg.substr(config_file_flag.size() + 1);
  }
  return path;
}

// Reads the file without declared options, so that nothing is dropped, and
// checks it: every category must be declared, our keys known and well typed.
caf::settings read_config_file(const std::string& path, const caf::config_option_set& declared) {
  auto raw = caf::actor_system_config::parse_config_file(path.c_str());
  if (!raw) {
    if (raw.error() == caf::sec::cannot_open_file)
      throw config_error("cannot open config file '" + path + "'");
    throw config_error("config file '" + path + "': " + caf::actor_system_config::render(raw.error()));
  }
  std::set<std::string> categories;
  for (const auto& opt : declared)
    categories.insert(str(opt.category()));
  // One deployment file serves every app: [server] belongs to troupe-serve, and
  // the other apps (troupe-generate, an embedding host) leave it alone.
  categories.insert("server");
  for (const auto& [name, value] : *raw) {
    if (!caf::holds_alternative<caf::settings>(value) || categories.count(name) > 0)
      continue;
    std::string known;
    for (const auto& c : categories)
      if (c != "global")
        known += (known.empty() ? "" : ", ") + c;
    throw config_error("config file '" + path + "': unknown category [" + name + "] (known: " + known + ")");
  }
  try {
    check_settings(*raw);
  } catch (const config_error& e) {
    throw config_error("config file '" + path + "': " + e.what());
  }
  return std::move(*raw);
}

// A command-line value as CAF would read it in a file (32 -> integer, 0.5 ->
// number, true -> bool), or as a string when it reads as nothing else.
caf::config_value natural_value(const std::string& text) {
  auto v = caf::config_value::parse(text);
  return v ? std::move(*v) : caf::config_value{text};
}

// One command-line override, typed by its declared option. `scratch` holds
// the same options as ours but bound to throwaway storage, since parsing an
// option also stores into the variable it is bound to.
void add_override(const std::string& arg, const caf::config_option_set& scratch, caf::settings& out) {
  auto body = arg.substr(2);  // drop "--"
  auto eq = body.find('=');
  auto name = body.substr(0, eq);
  auto text = eq == std::string::npos ? std::string() : body.substr(eq + 1);
  auto opt = scratch.qualified_name_lookup(name);
  if (opt == nullptr) {
    caf::settings unknown;
    caf::put(unknown, name, natural_value(text));
    check_settings(unknown);  // throws: unknown key, with the known ones
    throw config_error("unknown option --" + name);
  }
  if (eq == std::string::npos) {
    if (!opt->is_flag())
      throw config_error(name + " needs a value: --" + name + "=VALUE");
    caf::put(out, name, true);
    return;
  }
  if (auto typed = opt->parse(text)) {
    caf::put(out, name, std::move(*typed));
    return;
  }
  // Refused: report it with the type it looks like ("3.5 is a number").
  caf::settings wrong;
  caf::put(wrong, name, natural_value(text));
  check_settings(wrong);
  throw config_error("invalid value for " + name + ": '" + text + "'");
}

} // namespace

engine_system_config::engine_system_config() { add_engine_options(custom_options_, engine); }

bool engine_system_config::is_engine_override(const std::string& arg) {
  for (const char* category : engine_categories)
    if (has_prefix(arg, "--" + std::string(category) + "."))
      return true;
  return false;
}

bool engine_system_config::load(std::vector<std::string> args) {
  engine_config scratch_cfg;
  caf::config_option_set scratch;
  add_engine_options(scratch, scratch_cfg);

  // Our categories from the command line are checked and applied here, after
  // the file, so that they win and so that --engine.enable-prefix-caching=false
  // works (CAF accepts a bool option only as a bare flag).
  caf::settings overrides;
  std::vector<std::string> rest;
  for (auto& arg : args) {
    if (is_engine_override(arg))
      add_override(arg, scratch, overrides);
    else
      rest.push_back(std::move(arg));
  }

  const auto path = config_file_of(rest);
  caf::settings file;
  if (!path.empty())
    file = read_config_file(path, custom_options_);

  // CAF parses the rest (and the file again, for its own categories). Without
  // --config-file it gets an empty INI, so a caf-application.ini in the current
  // directory is never picked up behind the user's back.
  caf::error err;
  if (path.empty()) {
    std::istringstream no_file;
    err = parse(std::move(rest), no_file);
  } else {
    err = parse(std::move(rest));
  }
  if (err)
    throw config_error("bad argument: " + render(err));
  if (!remainder.empty())
    throw config_error("unexpected argument '" + remainder.front() + "'");
  if (cli_helptext_printed)
    return false;

  auto apply = [this](const caf::settings& source) {
    for (const char* category : engine_categories) {
      // A copy in CAF 0.17. The length is given: caf::string_view takes a bare const char*
      // only when CAF is compiled by GCC (the fuzz build uses clang).
      auto keys = caf::get_if<caf::settings>(&source, caf::string_view(category, std::strlen(category)));
      if (!keys)
        continue;
      for (const auto& [key, value] : *keys) {
        auto name = std::string(category) + "." + key;
        auto opt = custom_options_.qualified_name_lookup(name);
        const std::string_view type(opt->type_name().data(), opt->type_name().size());
        if (type == "real64" && caf::holds_alternative<caf::config_value::integer>(value))
          set(name, static_cast<double>(caf::get<caf::config_value::integer>(value)));  // CAF would drop it
        else
          set(name, value);
      }
    }
  };
  apply(file);
  apply(overrides);
  validate(engine);
  return true;
}

} // namespace troupe
