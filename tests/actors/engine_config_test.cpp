// The engine's configuration: validate() names key and value of each bad
// value, check_settings() refuses unknown keys and wrong types, and
// engine_system_config reads INI files and command-line overrides strictly.
#include <doctest/doctest.h>

#include "tests/support/temp_dir.hpp"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <string>
#include <vector>

#include "runtime/errors.hpp"
#include "tests/support/stories_model.hpp"
#include "troupe/engine.hpp"
#include "troupe/engine_system_config.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

using troupe::testing::temp_dir;

// The message of the config_error that `f` throws; fails the test when it throws none.
std::string config_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const config_error& e) {
    return e.what();
  }
  FAIL("no config_error was thrown");
  return {};
}

caf::settings settings_with(const std::string& key, caf::config_value value) {
  caf::settings s;
  caf::put(s, key, std::move(value));
  return s;
}

} // namespace

TEST_CASE("validate accepts the defaults") { CHECK_NOTHROW(validate(engine_config{})); }

TEST_CASE("validate names the key and the value of each bad value") {
  struct bad_case {
    const char* key;
    const char* value;
    std::function<void(engine_config&)> set;
  };
  const std::vector<bad_case> cases = {
      {"engine.block-size", "3", [](engine_config& c) { c.block_size = 3; }},
      {"engine.block-size", "512", [](engine_config& c) { c.block_size = 512; }},
      {"engine.block-size", "0", [](engine_config& c) { c.block_size = 0; }},
      {"engine.scheduler-policy", "lottery", [](engine_config& c) { c.scheduler_policy = "lottery"; }},
      {"engine.preemption-mode", "drop", [](engine_config& c) { c.preemption_mode = "drop"; }},
      {"engine.max-num-seqs", "0", [](engine_config& c) { c.max_num_seqs = 0; }},
      {"engine.gpu-memory-utilization", "1.5", [](engine_config& c) { c.gpu_memory_utilization = 1.5; }},
      {"engine.gpu-memory-utilization", "0", [](engine_config& c) { c.gpu_memory_utilization = 0; }},
      {"engine.device", "tpu", [](engine_config& c) { c.device = "tpu"; }},
      {"engine.kv-cache-mib", "0", [](engine_config& c) { c.kv_cache_mib = 0; }},
      {"engine.num-host-blocks", "-2", [](engine_config& c) { c.num_host_blocks = -2; }},
      {"engine.cpu-threads", "-1", [](engine_config& c) { c.cpu_threads = -1; }},
      {"debug.crash-executor", "-1", [](engine_config& c) { c.crash_executor = -1; }},
      {"debug.fail-tokenizer", "-3", [](engine_config& c) { c.fail_tokenizer = -3; }},
      {"engine.max-model-len", "-1", [](engine_config& c) { c.max_model_len = -1; }},
      {"model.dtype", "int4", [](engine_config& c) { c.dtype = "int4"; }},
      {"model.quantization", "int8", [](engine_config& c) { c.quantization = "int8"; }},
      {"speculative.method", "medusa", [](engine_config& c) { c.speculative_method = "medusa"; }},
      {"speculative.draft-model", "", [](engine_config& c) { c.speculative_method = "draft"; }},
      {"speculative.draft-load-format", "gguf", [](engine_config& c) { c.draft_load_format = "gguf"; }},
      {"speculative.draft-layers", "0", [](engine_config& c) { c.draft_layers = 0; }},
      {"speculative.ngram-min", "0", [](engine_config& c) { c.ngram_min = 0; }},
      {"speculative.ngram-max", "1", [](engine_config& c) {
         c.ngram_min = 3;
         c.ngram_max = 1;
       }},
      {"speculative.num-speculative-tokens", "0", [](engine_config& c) { c.num_speculative_tokens = 0; }},
  };
  for (const auto& bad : cases) {
    CAPTURE(bad.key);
    CAPTURE(bad.value);
    engine_config c;
    bad.set(c);
    auto message = config_error_of([&] { validate(c); });
    CHECK(message.find(bad.key) != std::string::npos);
    CHECK(message.find(std::string("'") + bad.value + "'") != std::string::npos);
    CHECK(message.find("allowed") != std::string::npos);
  }
}

TEST_CASE("spawn_engine on a missing model folder throws model_error naming config.json") {
  engine_config c;
  c.model_path = (testing::data_root() / "no-such-model").string();
  caf::actor_system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  try {
    spawn_engine(sys, c);
    FAIL("spawn_engine did not throw");
  } catch (const runtime::model_error& e) {
    CHECK(std::string(e.what()).find("config.json") != std::string::npos);
  }
}

TEST_CASE("model.load-format=dummy on the CPU backend is refused naming the key and the device it needs") {
  engine_config c;
  c.model_path = (testing::data_root() / "models" / "stories260k").string();
  c.load_format = "dummy";
  c.device = "cpu";
  validate(c); // a valid value: only the CPU backend refuses it
  caf::actor_system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  auto message = config_error_of([&] { spawn_engine(sys, c); });
  CHECK(message.find("model.load-format") != std::string::npos);
  CHECK(message.find("engine.device=cuda") != std::string::npos);
}

TEST_CASE("model.dtype=float16 and bfloat16 are valid values the CPU backend refuses, naming the key and the device") {
  for (const char* dtype : {"float16", "bfloat16"}) {
    CAPTURE(dtype);
    engine_config c;
    c.model_path = (testing::data_root() / "models" / "stories260k").string();
    c.dtype = dtype;
    c.device = "cpu";
    validate(c);
    caf::actor_system_config sys_cfg;
    caf::actor_system sys{sys_cfg};
    auto message = config_error_of([&] { spawn_engine(sys, c); });
    CHECK(message.find("model.dtype") != std::string::npos);
    CHECK(message.find(std::string("'") + dtype + "'") != std::string::npos);
    CHECK(message.find("engine.device=cuda") != std::string::npos);
  }
  engine_config c;
  c.model_path = (testing::data_root() / "models" / "stories260k").string();
  c.kv_cache_dtype = "float16";
  c.device = "cpu";
  validate(c);
  caf::actor_system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  auto message = config_error_of([&] { spawn_engine(sys, c); });
  CHECK(message.find("engine.kv-cache-dtype") != std::string::npos);
  CHECK(message.find("'float16'") != std::string::npos);
}

TEST_CASE("check_settings rejects an unknown key naming it and listing the known ones") {
  auto message = config_error_of([] { check_settings(settings_with("engine.blok-size", caf::config_value{3})); });
  CHECK(message.find("engine.blok-size") != std::string::npos);
  CHECK(message.find("block-size") != std::string::npos);
  CHECK(message.find("max-num-seqs") != std::string::npos);

  message = config_error_of([] { check_settings(settings_with("model.paht", caf::config_value{"x"})); });
  CHECK(message.find("model.paht") != std::string::npos);
  CHECK(message.find("load-format") != std::string::npos);
}

TEST_CASE("check_settings rejects a wrong-typed value naming key, value and type") {
  auto message =
      config_error_of([] { check_settings(settings_with("engine.block-size", caf::config_value{"big"})); });
  CHECK(message.find("engine.block-size") != std::string::npos);
  CHECK(message.find("big") != std::string::npos);
  CHECK(message.find("integer") != std::string::npos);

  message = config_error_of(
      [] { check_settings(settings_with("engine.enable-prefix-caching", caf::config_value{"yes"})); });
  CHECK(message.find("engine.enable-prefix-caching") != std::string::npos);
  CHECK(message.find("true or false") != std::string::npos);

  message = config_error_of([] { check_settings(settings_with("model.path", caf::config_value{5})); });
  CHECK(message.find("model.path") != std::string::npos);

  CHECK_THROWS_AS(check_settings(settings_with("engine.max-num-seqs", caf::config_value{2.5})), config_error);
}

TEST_CASE("check_settings accepts good values, an integer for a number, and other categories") {
  caf::settings s;
  caf::put(s, "engine.block-size", caf::config_value{32});
  caf::put(s, "engine.gpu-memory-utilization", caf::config_value{1});
  caf::put(s, "engine.swap-space-gib", caf::config_value{0.5});
  caf::put(s, "engine.enable-prefix-caching", caf::config_value{false});
  caf::put(s, "model.path", caf::config_value{"models/x"});
  caf::put(s, "scheduler.whatever", caf::config_value{1});  // CAF's own category: not ours to check
  CHECK_NOTHROW(check_settings(s));
  CHECK_NOTHROW(check_settings(caf::settings{}));
}

TEST_CASE("check_settings rejects a category given as a plain value") {
  caf::settings s;
  s["engine"] = caf::config_value{3};
  auto message = config_error_of([&] { check_settings(s); });
  CHECK(message.find("engine") != std::string::npos);
}

TEST_CASE("an INI file parses through engine_system_config and the command line beats it") {
  temp_dir dir{"troupe_config_test"};
  auto ini = dir.write("engine.ini", "[model]\npath=\"/models/tiny\"\n"
                                     "[engine]\nblock-size=64\nmax-num-seqs=8\ngpu-memory-utilization=1\n"
                                     "enable-prefix-caching=true\nscheduler-policy=\"priority\"\n");
  engine_system_config cfg;
  REQUIRE(cfg.load({"--config-file=" + ini.string(), "--engine.block-size=32",
                    "--engine.enable-prefix-caching=false"}));
  CHECK(cfg.engine.block_size == 32);                 // command line over the file
  CHECK(cfg.engine.max_num_seqs == 8);                // from the file
  CHECK(cfg.engine.model_path == "/models/tiny");     // from the file
  CHECK(cfg.engine.gpu_memory_utilization == 1.0);    // an integer for a number, not dropped
  CHECK(cfg.engine.enable_prefix_caching == false);   // a bool override with a value
  CHECK(cfg.engine.scheduler_policy == "priority");
  CHECK(cfg.engine.kv_cache_mib == engine_config{}.kv_cache_mib);  // untouched: the default
  // What the content says agrees with the bound fields (engine_config_from reads it).
  CHECK(engine_config_from(cfg) == cfg.engine);
}

TEST_CASE("engine_system_config refuses bad files and bad overrides with the key in the message") {
  temp_dir dir{"troupe_config_test"};
  auto unknown_key = dir.write("a.ini", "[engine]\nblok-size=32\n");
  auto wrong_type = dir.write("b.ini", "[engine]\nblock-size=\"big\"\n");
  auto bad_value = dir.write("c.ini", "[engine]\nblock-size=3\n");
  auto unknown_category = dir.write("d.ini", "[engin]\nblock-size=32\n");
  auto syntax = dir.write("e.ini", "[engine]\nblock-size=\n");
  struct bad_load {
    std::vector<std::string> args;
    const char* expected;
  };
  const std::vector<bad_load> cases = {
      {{"--config-file=" + unknown_key.string()}, "engine.blok-size"},
      {{"--config-file=" + wrong_type.string()}, "engine.block-size"},
      {{"--config-file=" + bad_value.string()}, "engine.block-size"},
      {{"--config-file=" + unknown_category.string()}, "engin"},
      {{"--config-file=" + syntax.string()}, "e.ini"},
      {{"--config-file=" + (dir.path / "missing.ini").string()}, "missing.ini"},
      {{"--engine.blok-size=32"}, "engine.blok-size"},
      {{"--engine.block-size=big"}, "engine.block-size"},
      {{"--engine.block-size=3"}, "engine.block-size"},
      {{"--engine.block-size"}, "engine.block-size"},
      {{"--engine.enable-prefix-caching=maybe"}, "engine.enable-prefix-caching"},
      {{"--speculative.method=medusa"}, "speculative.method"},
      {{"--debug.fail-draft=-2"}, "debug.fail-draft"},
      {{"--debug.crash-everything=1"}, "debug.crash-everything"},
      {{"--no-such-option=1"}, "no-such-option"},
      {{"stray"}, "stray"},
  };
  for (const auto& bad : cases) {
    CAPTURE(bad.args.front());
    engine_system_config cfg;
    auto message = config_error_of([&] { cfg.load(bad.args); });
    CHECK(message.find(bad.expected) != std::string::npos);
  }
}

TEST_CASE("engine_system_config reads no default file") {
  // CAF 0.17 would read caf-application.ini from the current directory.
  temp_dir dir{"troupe_config_test"};
  dir.write("caf-application.ini", "[engine]\nblock-size=128\n");
  auto old = fs::current_path();
  fs::current_path(dir.path);
  engine_system_config cfg;
  bool loaded = cfg.load({});
  fs::current_path(old);
  CHECK(loaded);
  CHECK(cfg.engine == engine_config{});
}

TEST_CASE("configs/stories260k-cpu.ini holds the option table's text: every key, its default and its doc") {
  auto path = testing::data_root() / "configs" / "stories260k-cpu.ini";
  std::ifstream in(path);
  REQUIRE(in);
  const std::string file{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const std::string expected = engine_ini();
  const bool holds = file.find(expected) != std::string::npos;
  if (!holds) {
    // The text the file should hold, to copy in after changing an option.
    auto wanted = fs::temp_directory_path() / "troupe-engine.ini";
    std::ofstream(wanted) << expected;
    FAIL_CHECK(path.string() << " does not hold engine_ini(): the expected text is in " << wanted.string());
  }
  // Every declared option is in the text, and the file loads to the defaults.
  engine_config scratch;
  caf::config_option_set options;
  add_engine_options(options, scratch);
  for (const auto& opt : options) {
    auto key = "\n" + std::string(opt.long_name().begin(), opt.long_name().end()) + "=";
    CAPTURE(key);
    CHECK(expected.find(key) != std::string::npos);
  }
  engine_system_config cfg;
  REQUIRE(cfg.load({"--config-file=" + path.string()}));
  CHECK(cfg.engine == engine_config{});
}

TEST_CASE("engine_ini lists the categories of engine_categories, each once, in that order") {
  const std::string text = engine_ini();
  std::size_t last = 0;
  for (const char* category : engine_categories) {
    CAPTURE(category);
    const auto at = text.find(std::string("[") + category + "]");
    REQUIRE(at != std::string::npos);
    CHECK(at >= last);
    CHECK(text.find(std::string("[") + category + "]", at + 1) == std::string::npos);
    last = at;
  }
}

TEST_CASE("an option's documentation is its --long-help text") {
  engine_config scratch;
  caf::config_option_set options;
  add_engine_options(options, scratch);
  auto block_size = options.qualified_name_lookup("engine", "block-size");
  REQUIRE(block_size != nullptr);
  const std::string help(block_size->description().begin(), block_size->description().end());
  CHECK(help.find("power of two") != std::string::npos);
  CHECK(engine_ini().find("; " + help + "\nblock-size=16\n") != std::string::npos);
}

TEST_CASE("the [debug] fault keys load from a file and the command line") {
  temp_dir dir{"troupe_config_test"};
  auto file = dir.write("faults.ini", "[debug]\nfail-swap-copy=3\ncrash-draft=7\n");
  engine_system_config cfg;
  REQUIRE(cfg.load({"--config-file=" + file.string(), "--debug.crash-executor=5", "--debug.crash-draft=9"}));
  CHECK(cfg.engine.fail_swap_copy == 3);
  CHECK(cfg.engine.crash_executor == 5);
  CHECK(cfg.engine.crash_draft == 9); // the command line beats the file
  CHECK(cfg.engine.fail_executor_step == 0);
  CHECK(cfg.engine.fail_tokenizer == 0);
}
