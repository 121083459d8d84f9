// Compiles requests' constraints for one model's vocabulary and keeps the results by their
// text: clients send the same schema with every request, and a compile costs far more than a
// lookup. Shared by the request actors (which compile at admission, so a bad constraint is
// the request's error) and the executor (which finds the compiled one here).
#pragma once

#include <chrono>
#include <cstdint>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "runtime/structured/compiled_constraint.hpp"
#include "troupe/sampling_params.hpp"

namespace troupe::runtime::structured {

// The grammar of a request's constraint (validated). Throws invalid_argument_error naming
// the field and what is wrong with it.
grammar compile_grammar(const output_constraint& spec);

class constraint_cache {
 public:
  explicit constraint_cache(std::shared_ptr<const token_vocabulary> vocab, std::size_t capacity = 256);

  // The compiled constraint, compiled now, found, or awaited from a concurrent compile of the
  // same text (a constraint is compiled once however many requests bring it at once). Throws invalid_argument_error for
  // a constraint that does not compile or that no output of this vocabulary satisfies. `admission`: a request's first
  // look (counted in requests and hits); the executor's later look for the same constraint is not.
  std::shared_ptr<const compiled_constraint> get(const output_constraint& spec, bool admission = true);

  struct counters {
    std::uint64_t requests = 0, compiled = 0, hits = 0; // hits and requests: at admission
    double compile_ms = 0;                              // summed over the compiles
  };
  counters stats() const;
  const token_vocabulary& vocabulary() const { return *vocab_; }

 private:
  std::shared_ptr<const compiled_constraint> compile(const output_constraint& spec) const;

  std::shared_ptr<const token_vocabulary> vocab_;
  std::size_t capacity_;
  mutable std::mutex mutex_;
  // Least recently used first.
  std::list<std::pair<std::string, std::shared_ptr<const compiled_constraint>>> lru_;
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
  // Constraints being compiled now: a second request for one waits for the first's result.
  std::unordered_map<std::string, std::shared_future<std::shared_ptr<const compiled_constraint>>> compiling_;
  counters counters_;
};

} // namespace troupe::runtime::structured
