// troupe's public API for a host CAF application (DESIGN.md §6): the engine's
// handle, the messages it takes and answers (troupe/messages.hpp), and
// spawn_engine, which starts it from an engine_config (troupe/engine_config.hpp).
#pragma once

#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <string>
#include <vector>

#include "troupe/engine_config.hpp"
#include "troupe/engine_stats.hpp"
#include "troupe/errors.hpp"
#include "troupe/ids.hpp"
#include "troupe/messages.hpp"

namespace troupe {

// The engine's face.
using engine_actor = caf::typed_actor<
    // -> the request's id; deltas then finished (or failed) go to the sink
    caf::replies_to<generate_atom, request_spec, sink_actor>::with<request_id>,
    caf::reacts_to<cancel_atom, request_id>,
    caf::replies_to<stats_atom>::with<engine_stats>,
    caf::replies_to<info_atom>::with<model_info>,
    // text, add_special_tokens -> ids (vLLM's /tokenize)
    caf::replies_to<tokenize_atom, std::string, bool>::with<std::vector<token_id>>,
    // ids -> text (vLLM's /detokenize); an id outside the vocabulary is an error
    caf::replies_to<detok_atom, std::vector<token_id>>::with<std::string>>;

// Loads the model (throws config_error or model_error with a clear
// message), spawns the engine's actors into `sys`, returns the engine.
engine_actor spawn_engine(caf::actor_system& sys, const engine_config& cfg);

} // namespace troupe
