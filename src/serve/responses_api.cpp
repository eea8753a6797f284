// The Responses API's routes (responses_api.h): creation goes through the generation route
// like chat completions; GET and DELETE read and remove the stored record.
#include "serve/responses_api.h"

#include <httplib.h>

#include "serve/generation_route.h"
#include "serve/http_reply.h"
#include "serve/json_body.h"

namespace kvmem::serve {

void ServeResponseCreate(const GenerationContext& ctx, const httplib::Request& req,
                         std::string_view body, httplib::Response& res, const std::string& tenant) {
  Backend& backend = *ctx.backend;
  ServeGeneration(
      ctx, Dialect::kOpenAi,
      [&backend](std::string_view text, const RequestContext& request_ctx) {
        return ParseResponsesRequest(text, request_ctx, backend);
      },
      req, body, res, tenant);
}

void ServeResponseById(Backend& backend, const httplib::Request& req, httplib::Response& res,
                       const std::string& tenant) {
  const std::string id = req.matches[1];
  if (req.method == "DELETE") {
    Status deleted = backend.DeleteResponse(tenant, id);
    if (!deleted.ok()) return SendStatus(res, deleted, Dialect::kOpenAi);
    return SendJson(res, DumpJson({{"id", id}, {"object", "response"}, {"deleted", true}}));
  }
  Result<Json> record = backend.GetResponse(tenant, id);
  if (!record.ok()) return SendStatus(res, record.status(), Dialect::kOpenAi);
  const Json* response = FindField(*record, "response");
  if (response == nullptr || !response->is_object()) {
    return SendStatus(res, Corrupt("stored response '" + id + "' has no response object"),
                      Dialect::kOpenAi);
  }
  SendJson(res, DumpJson(*response));
}

}  // namespace kvmem::serve
