// Structured output in the OpenAI dialect (chat and completions): `response_format` and kvmem's
// `grammar` extension become GenerationRequest::grammar, which the backend applies as a token
// mask at each sampling step (engine/grammar/). Accepted:
//   response_format  {"type": "text"} (free text), {"type": "json_object"} (any JSON object),
//                    {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}: the
//                    schema's subset is engine/grammar/json_schema.h's; the output is held to it
//                    whether strict is true or not. Properties come in the schema's order.
//   grammar          a GBNF grammar (engine/grammar/grammar.h) with a rule "root"
// A schema or grammar the compiler refuses is InvalidArgument naming the field and the
// construct ("'response_format.json_schema.schema': JSON schema at '/properties/age': keyword
// 'minimum' is not supported"); both fields at once is InvalidArgument.
// Thread-safety: pure functions.
#pragma once

#include <string_view>

#include "core/status.h"
#include "serve/api_types.h"
#include "serve/json_body.h"

namespace kvmem::serve {

// `body_text` is `body` as sent (re-read to keep the schema's property order).
Status ReadConstrainedOutput(const Json& body, std::string_view body_text, GenerationRequest* out);

}  // namespace kvmem::serve
