#include "serve/constrained_output.h"

#include <string>

#include "engine/grammar/json_schema.h"

namespace kvmem::serve {
namespace {

using engine::grammar::Grammar;

// The schema of response_format.json_schema as sent: nlohmann::json sorts an object's keys,
// so the schema is read again from the body text with its order.
std::string SchemaText(std::string_view body_text) {
  const nlohmann::ordered_json body = nlohmann::ordered_json::parse(body_text, nullptr, false);
  return body["response_format"]["json_schema"]["schema"].dump(
      -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

Result<std::shared_ptr<const Grammar>> ReadResponseFormat(const Json& format,
                                                          std::string_view body_text) {
  if (!format.is_object()) return TypeError("response_format", "an object", format);
  KVMEM_ASSIGN_OR_RETURN(std::string type,
                         RequiredString(format, "type", "response_format.type"));
  if (type == "text") return std::shared_ptr<const Grammar>();
  if (type == "json_object") return engine::grammar::CompileJsonObject();
  if (type != "json_schema") {
    return FieldError("response_format.type",
                      "must be text, json_object or json_schema, got '" + type + "'");
  }
  const Json* spec = FindField(format, "json_schema");
  if (spec == nullptr) return FieldError("response_format.json_schema", "required");
  if (!spec->is_object()) return TypeError("response_format.json_schema", "an object", *spec);
  KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> name,
                         OptionalString(*spec, "name", "response_format.json_schema.name"));
  KVMEM_ASSIGN_OR_RETURN(std::optional<bool> strict,
                         OptionalBool(*spec, "strict", "response_format.json_schema.strict"));
  (void)name;
  (void)strict;  // held to the schema either way
  const Json* schema = FindField(*spec, "schema");
  if (schema == nullptr) return engine::grammar::CompileJsonObject();
  if (!schema->is_object() && !schema->is_boolean()) {
    return TypeError("response_format.json_schema.schema", "an object", *schema);
  }
  Result<std::shared_ptr<const Grammar>> g =
      engine::grammar::CompileJsonSchema(SchemaText(body_text));
  if (!g.ok()) return FieldError("response_format.json_schema.schema", g.status().message());
  return *g;
}

}  // namespace

Status ReadConstrainedOutput(const Json& body, std::string_view body_text,
                             GenerationRequest* out) {
  if (const Json* format = FindField(body, "response_format")) {
    KVMEM_ASSIGN_OR_RETURN(out->grammar, ReadResponseFormat(*format, body_text));
  }
  KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> gbnf, OptionalString(body, "grammar", "grammar"));
  if (!gbnf) return Status::Ok();
  if (out->grammar != nullptr) {
    return FieldError("grammar", "cannot be combined with a response_format other than text");
  }
  Result<Grammar> g = Grammar::Parse(*gbnf);
  if (!g.ok()) return FieldError("grammar", g.status().message());
  out->grammar = std::make_shared<const Grammar>(std::move(*g));
  return Status::Ok();
}

}  // namespace kvmem::serve
