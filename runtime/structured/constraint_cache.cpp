// Compiling and caching constraints (see constraint_cache.hpp).
#include "runtime/structured/constraint_cache.hpp"

#include <boost/json.hpp>

#include <exception>
#include <future>

#include "runtime/errors.hpp"
#include "runtime/structured/gbnf_grammar.hpp"
#include "runtime/structured/json_schema_grammar.hpp"
#include "runtime/structured/regex_grammar.hpp"
#include "runtime/structured/tool_call_grammar.hpp"

namespace troupe::runtime::structured {

namespace {

grammar choice_grammar(const std::vector<std::string>& choices) {
  grammar g;
  std::vector<sequence> alternatives;
  for (const auto& c : choices)
    alternatives.push_back(grammar::literal(c));
  g.set_root(g.add_rule("choice", std::move(alternatives)));
  g.validate();
  return g;
}

std::string key_of(const output_constraint& spec) {
  std::string key = to_string(spec.type);
  key += '\n';
  key += spec.text;
  for (const auto& c : spec.choices) {
    key += '\0';
    key += std::to_string(c.size());
    key += ':';
    key += c;
  }
  return key;
}

} // namespace

grammar compile_grammar(const output_constraint& spec) {
  switch (spec.type) {
    case output_constraint::kind::json_object:
      return any_json_grammar();
    case output_constraint::kind::json_schema: {
      boost::system::error_code ec;
      auto schema = boost::json::parse(spec.text, ec);
      if (ec)
        throw invalid_argument_error("the JSON schema is not valid JSON: " + ec.message(), "response_format");
      return json_schema_grammar(schema);
    }
    case output_constraint::kind::regex:
      return regex_grammar(spec.text);
    case output_constraint::kind::choice:
      return choice_grammar(spec.choices);
    case output_constraint::kind::grammar:
      return gbnf_grammar(spec.text);
    case output_constraint::kind::tool_calls:
      return tool_call_grammar_from_text(spec.text);
    case output_constraint::kind::none:
      break;
  }
  throw invalid_argument_error("no constraint to compile", "structured_output");
}

constraint_cache::constraint_cache(std::shared_ptr<const token_vocabulary> vocab, std::size_t capacity)
    : vocab_(std::move(vocab)), capacity_(capacity < 1 ? 1 : capacity) {}

std::shared_ptr<const compiled_constraint> constraint_cache::compile(const output_constraint& spec) const {
  const auto g = compile_grammar(spec);
  auto compiled = std::make_shared<const compiled_constraint>(g, vocab_);
  const auto& start = compiled->start();
  if (!compiled->matcher().accepts(start) && compiled->allowed(start)->allowed == 0)
    throw invalid_argument_error(
        std::string("the ") + to_string(spec.type) + " constraint admits no output that this model's tokens can write",
        "structured_output");
  return compiled;
}

std::shared_ptr<const compiled_constraint> constraint_cache::get(const output_constraint& spec, bool admission) {
  auto key = key_of(spec);
  std::promise<std::shared_ptr<const compiled_constraint>> promise;
  {
    std::unique_lock lock(mutex_);
    counters_.requests += admission ? 1 : 0;
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.end(), lru_, it->second);
      counters_.hits += admission ? 1 : 0;
      return it->second->second;
    }
    // Another request compiles the same text right now: wait for its result (or its error)
    // rather than compile it twice.
    if (auto it = compiling_.find(key); it != compiling_.end()) {
      auto pending = it->second;
      lock.unlock();
      auto compiled = pending.get(); // throws the compile's error
      lock.lock();
      counters_.hits += admission ? 1 : 0;
      return compiled;
    }
    compiling_.emplace(key, promise.get_future().share());
  }
  // Compiled outside the lock: a long compile must not hold up other constraints' lookups.
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<const compiled_constraint> compiled;
  try {
    compiled = compile(spec);
  } catch (...) {
    promise.set_exception(std::current_exception());
    std::lock_guard lock(mutex_);
    compiling_.erase(key);
    throw;
  }
  promise.set_value(compiled);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard lock(mutex_);
  compiling_.erase(key);
  ++counters_.compiled;
  counters_.compile_ms += ms;
  lru_.emplace_back(key, compiled);
  index_.emplace(std::move(key), std::prev(lru_.end()));
  if (lru_.size() > capacity_) {
    index_.erase(lru_.front().first);
    lru_.pop_front();
  }
  return compiled;
}

constraint_cache::counters constraint_cache::stats() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

} // namespace troupe::runtime::structured
