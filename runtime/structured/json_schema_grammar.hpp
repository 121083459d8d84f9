// JSON Schema (OpenAI response_format json_schema, vLLM guided_json) and json_object mode
// compiled to the byte-level grammar: the text a model may write is exactly valid JSON.
#pragma once

#include <boost/json/value.hpp>

#include "runtime/structured/grammar.hpp"

namespace troupe::runtime::structured {

// Whitespace between JSON tokens: at most this many bytes of ' ' or '\n'. Enough for the
// separators models and json.dumps write (", " and ": ", a newline before a closing
// brace), but bounded: with unbounded whitespace a model can emit spaces for ever and never
// finish the value (a known failure of other engines' JSON grammars). Indented,
// pretty-printed JSON is therefore not allowed; the value's text is compact.
inline constexpr int max_json_whitespace = 2;

// json_object mode: any JSON object at the top level, any JSON values inside it.
grammar any_json_grammar();

// The grammar of the JSON texts that `schema` accepts. Numbers follow JSON's grammar, with
// at most three exponent digits. The supported subset (a superset of
// OpenAI strict mode's):
//  - true / {} (any value); type (one or a list), nullable: true (OpenAPI's null);
//  - enum, const (any JSON values, written as their compact serialization: strings as
//    boost::json writes them, numbers in their shortest round-trip form, integral doubles
//    without exponent); siblings other than type / nullable are refused;
//  - anyOf, oneOf (as anyOf: an output matching two branches is not excluded), allOf with
//    one subschema, $ref to any local JSON pointer ("#", "#/$defs/x", "#/definitions/x",
//    recursion included); none of these combine with other constraining keywords;
//  - objects: properties in the schema's order, required vs optional (any subset of the
//    optional ones, order kept); additionalProperties false or absent alongside
//    properties closes the object, like OpenAI strict (true or a schema alongside
//    properties is accepted, but only the declared properties are generated: a subset
//    of the valid values); without properties: any object (absent / true), {} (false),
//    or an object of values of the additionalProperties schema;
//  - arrays: items, prefixItems, minItems, maxItems (at most max_repeat_bound),
//    uniqueItems false;
//  - strings: minLength, maxLength (code points, an escape counts as one; at most
//    max_repeat_bound), format date, time, date-time (RFC 3339, any year's February 29,
//    an offset required, 1 to 6 fraction digits), uuid, ipv4, email (dot-separated
//    atoms @ a dotted domain); other formats are annotations (any string), as JSON Schema
//    2020-12 treats them by default; pattern (regex_grammar's syntax, matched against the
//    decoded string anywhere in it, as JSON Schema says; a leading '^' / trailing '$' put
//    the match at that end, else any text may surround it; with an anchor inside an
//    alternative, "^a|b", the strings generated are a subset of the valid ones; not with
//    minLength, maxLength or format);
//  - integers: minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers, |bound| up
//    to 2^53); numbers with those bounds generate plain decimals (no exponent) whose
//    integer part keeps them inside the bounds: a subset of the valid values;
//  - annotations are ignored: description, title, default, examples, $schema, $id,
//    $comment, strict, deprecated, readOnly, writeOnly, $defs, definitions, discriminator,
//    contentEncoding, contentMediaType.
// No whitespace before or after the top-level value.
// Any other keyword (multipleOf, patternProperties, minProperties, not, if, ...)
// is refused with invalid_argument_error(param "response_format") naming it and its
// JSON pointer in the schema, as are bad values, unresolvable $refs, bounds above the
// grammar's limits and schemas no finite JSON value satisfies.
grammar json_schema_grammar(const boost::json::value& schema);

} // namespace troupe::runtime::structured
