// A host CAF application that embeds troupe: its own config declares the
// engine's options, its own typed actor receives the output, and the engine
// runs inside the host's actor system (DESIGN.md §6).
#include <caf/all.hpp>

#include <iostream>
#include <string>

#include "troupe/engine.hpp"

namespace {

// The host's configuration: CAF's own options, the engine's, and its own.
struct host_config : caf::actor_system_config {
  troupe::engine_config engine;
  std::string prompt = "Once upon a time";

  host_config() {
    troupe::add_engine_options(custom_options_, engine);
    caf::config_option_adder{custom_options_, "example"}.add(prompt, "prompt", "prompt of both requests");
  }
};

// The host's receiver of deltas. It quits once `expected` requests have
// ended, with an error when one of them failed, so whoever monitors it knows.
struct printer_state {
  int ended = 0;
  bool any_failed = false;
  static inline const char* name = "printer";
};

troupe::sink_actor::behavior_type printer(troupe::sink_actor::stateful_pointer<printer_state> self, int expected) {
  auto end_one = [self, expected] {
    if (++self->state.ended < expected)
      return;
    if (self->state.any_failed)
      self->quit(caf::make_error(caf::sec::runtime_error, "a request failed"));
    else
      self->quit();
  };
  return {
      [](const troupe::delta& d) {
        std::string text = d.text;  // one delta per line: show newlines as \n
        for (auto pos = text.find('\n'); pos != std::string::npos; pos = text.find('\n', pos + 2))
          text.replace(pos, 1, "\\n");
        std::cout << "[" << d.id << "] " << text << "\n";
      },
      [end_one](const troupe::finished& f) {
        std::cout << "finished id=" << f.id << " reason=" << f.reason << " tokens=" << f.usage.completion_tokens
                  << " prompt_tokens=" << f.usage.prompt_tokens << " ttft_ms=" << f.timings.ttft_ms << "\n";
        end_one();
      },
      [self, end_one](const troupe::failed& f) {
        std::cout << "failed id=" << f.id << " code=" << f.code << ": " << f.message << "\n";
        self->state.any_failed = true;
        end_one();
      },
  };
}

int run(host_config& cfg) {
  caf::actor_system sys{cfg};
  auto engine = troupe::spawn_engine(sys, cfg.engine);  // validates; throws on a bad config or model
  auto sink = sys.spawn(printer, 2);

  troupe::request_spec greedy;
  greedy.prompt = cfg.prompt;
  greedy.params.temperature = 0;
  greedy.params.max_tokens = 32;
  greedy.params.ignore_eos = true;  // exactly 32 tokens, whatever the model says

  troupe::request_spec sampled;
  sampled.prompt = cfg.prompt;
  sampled.params.temperature = 0.8f;
  sampled.params.top_p = 0.9f;
  sampled.params.max_tokens = 48;
  sampled.params.seed = 42;  // the same story on every run

  int rc = 0;
  {
    caf::scoped_actor self{sys};
    self->monitor(sink);
    for (const auto* spec : {&greedy, &sampled})
      self->request(engine, caf::infinite, troupe::generate_atom::value, *spec, sink)
          .receive([](troupe::request_id id) { std::cout << "sent request id=" << id << "\n"; },
                   [&](caf::error& e) {
                     std::cerr << "embed_example: generate: " << sys.render(e) << "\n";
                     rc = 1;
                   });
    if (rc == 0)
      self->receive([&](const caf::down_msg& dm) {
        if (dm.reason) {
          std::cerr << "embed_example: " << sys.render(dm.reason) << "\n";
          rc = 1;
        }
      });
  }
  // The engine's actors live until told otherwise; the system waits for them.
  caf::anon_send_exit(engine, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
  return rc;
}

} // namespace

int main(int argc, char** argv) {
  host_config cfg;
  if (auto err = cfg.parse(argc, argv)) {  // CAF reads caf-application.ini if present, or --config-file=FILE
    std::cerr << "embed_example: " << caf::actor_system_config::render(err) << "\n";
    return 2;
  }
  if (cfg.cli_helptext_printed)
    return 0;
  try {
    // CAF keeps unknown keys but drops wrong-typed values of a file silently:
    // check what the file says as written, then what was parsed.
    if (auto file = caf::get_if<std::string>(&cfg.content, "config-file"))
      if (auto raw = caf::actor_system_config::parse_config_file(file->c_str()))
        troupe::check_settings(*raw);
    troupe::check_settings(cfg.content);
    troupe::validate(cfg.engine);
    return run(cfg);
  } catch (const std::exception& e) {  // config_error, runtime::model_error
    std::cerr << "embed_example: " << e.what() << "\n";
    return 1;
  }
}
