// Fuzzes the structured-output compilers (runtime/structured: JSON schema, regex, GBNF, choice),
// which read text any client sends: each input compiles or is refused with
// invalid_argument_error, never crashes or hangs; a compiled grammar is valid, and the matcher
// agrees with an independent recognizer on the input's own bytes (or refuses a grammar too
// ambiguous to follow).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_support.hpp"
#include "runtime/errors.hpp"
#include "runtime/structured/constraint_cache.hpp"
#include "runtime/structured/grammar_matcher.hpp"
#include "tests/support/grammar_recognizer.hpp"

namespace {

using namespace troupe;
using namespace troupe::runtime::structured;
using fuzz::check;

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0)
    return 0;
  // The first byte picks the front end; the rest is its text (choices: one per line).
  const auto text = fuzz::as_text(data + 1, size - 1);
  output_constraint c;
  switch (data[0] % 5) {
    case 0:
      c = {output_constraint::kind::json_schema, std::string(text), {}};
      break;
    case 1:
      c = {output_constraint::kind::regex, std::string(text), {}};
      break;
    case 2:
      c = {output_constraint::kind::grammar, std::string(text), {}};
      break;
    case 3: {
      c.type = output_constraint::kind::choice;
      std::size_t at = 0;
      while (at <= text.size()) {
        const auto end = std::min(text.find('\n', at), text.size());
        if (end > at)
          c.choices.emplace_back(text.substr(at, end - at));
        at = end + 1;
      }
      if (c.choices.empty())
        return 0;
      break;
    }
    default:
      c.type = output_constraint::kind::json_object;
  }
  grammar g;
  try {
    g = compile_grammar(c);
  } catch (const runtime::invalid_argument_error& e) {
    check(std::string(e.what()).size() > 0, "a refusal says why");
    return 0;
  }
  try {
    g.validate();
  } catch (const runtime::invalid_argument_error& e) {
    check(false, "a compiled grammar fails validate()", e.what());
  }
  // The matcher and the recognizer agree on short probes: the input itself, and its prefixes.
  // A grammar too ambiguous to follow is refused on the byte where its state grows too big.
  const grammar_matcher m(g);
  troupe::test::grammar_recognizer rec(g);
  const auto probe = text.substr(0, 48);
  try {
    auto state = m.start();
    for (std::size_t n = 0; n <= probe.size(); ++n) {
      const bool accepted = !state.dead() && m.accepts(state);
      check(accepted == rec.matches(probe.substr(0, n)), "matcher and recognizer disagree", probe.substr(0, n));
      if (n < probe.size())
        state = m.advance(state, static_cast<std::uint8_t>(probe[n]));
    }
  } catch (const runtime::invalid_argument_error& e) {
    check(std::string(e.what()).find("too ambiguous") != std::string::npos, "the matcher refuses only ambiguity",
          e.what());
  }
  return 0;
}
