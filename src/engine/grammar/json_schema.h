// JSON Schema -> GBNF, for response_format json_schema (and json_object) and tool arguments.
//
// The subset: type (one name or an array), object with properties / required /
// additionalProperties (false, true or a schema), array with items / minItems / maxItems,
// string with minLength / maxLength, integer, number, boolean, null, enum, const, anyOf, oneOf
// (as anyOf: an instance that matches two branches is accepted), allOf of one schema, $ref to
// "#", "#/$defs/..." or "#/definitions/..." (recursive references included), and the
// annotations that constrain nothing (title, description, default, examples, format, ...).
// Anything else (pattern, minimum, maximum, multipleOf, patternProperties, prefixItems,
// uniqueItems, not, if/then/else, remote $ref, ...) is InvalidArgument naming the keyword and
// where it is ("/properties/age: keyword 'minimum' is not supported"), as is a schema that
// cannot be satisfied in an obvious way (empty enum, minItems > maxItems, a required property
// whose schema is false).
//
// Choices, as strict structured-output servers make them:
// - Object properties come in the order the schema lists them; an absent additionalProperties
//   means false when the schema lists properties (a schema without properties is any object).
//   Extra properties (additionalProperties true or a schema) come after the listed ones, under
//   names that are not listed ones (compared as written: an escaped spelling of a listed name,
//   "\u0061" for "a", is not caught).
// - Whitespace (JsonSpelling::kFree) is bounded, so a model cannot pad forever: nothing, one
//   space, or a newline and up to 40 spaces or tabs, between tokens; none before or after the
//   root value.
// - Numbers: at most 16 integer digits, 16 fraction digits and 3 exponent digits.
//
// Thread-safety: pure functions.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "engine/grammar/grammar.h"

namespace kvmem::engine::grammar {

inline constexpr int kMaxSchemaDepth = 64;  // nested schemas (and $ref chains being compiled)

// How the JSON may be spelled. kFree: as above. One spelling per value, so that a value the model
// wrote and the server re-serializes (a tool call sent back) comes out byte for byte:
// kCompact, no whitespace (serve/tool_calls.h's generic format); kPython, Python's json.dumps
// (", " and ": "), as chat templates' tojson writes tool calls. Either way strings take only the
// shortest escapes (\n, \", \u001f; any other character as itself). Numbers are not held to one
// spelling (1.50 and 1.5 both pass).
enum class JsonSpelling { kFree, kCompact, kPython };

// The GBNF (root rule "root") of the JSON values that `schema_json` (a JSON document) allows.
Result<std::string> JsonSchemaToGbnf(std::string_view schema_json,
                                     JsonSpelling spelling = JsonSpelling::kFree);
// The GBNF of any JSON object (response_format json_object).
std::string JsonObjectGbnf();

// Both of the above, parsed.
Result<std::shared_ptr<const Grammar>> CompileJsonSchema(std::string_view schema_json);
std::shared_ptr<const Grammar> CompileJsonObject();

}  // namespace kvmem::engine::grammar
