// The structured-output fields of a request, read into one output_constraint: OpenAI's
// response_format (json_object, json_schema), vLLM's guided_json / guided_regex /
// guided_choice / guided_grammar and its newer structured_outputs object. Shared by
// /v1/completions, /v1/chat/completions and the WebSocket generate frame.
#pragma once

#include <boost/json/object.hpp>

#include "troupe/sampling_params.hpp"

namespace troupe::net {

// The request's constraint (kind none when it sets none). Throws request_rejected (400
// naming the field) on a wrong type, an unknown response_format type, or two constraints
// at once. Whether a schema, regex or grammar compiles is the engine's check, at admission.
output_constraint read_output_constraint(const boost::json::object& body);

} // namespace troupe::net
