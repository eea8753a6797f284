#include "serve/agent_path.h"

#include "memory/policy/segments.h"
#include "serve/json_body.h"
#include "serve/request_fields.h"

namespace kvmem::serve {
namespace {

constexpr std::string_view kPrefix = "/v1/agents/";

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Result<std::string> PercentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    const int hi = i + 2 < s.size() ? HexValue(s[i + 1]) : -1;
    const int lo = hi >= 0 ? HexValue(s[i + 2]) : -1;
    if (lo < 0) {
      return InvalidArgument("'%' at offset " + std::to_string(i) +
                             " is not followed by two hex digits");
    }
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

Result<AgentPath> ParseAgentPath(std::string_view target) {
  std::string_view path = target.substr(0, target.find('?'));
  if (!path.starts_with(kPrefix)) return NotFound("not an agent path");
  path.remove_prefix(kPrefix.size());
  AgentPath out;
  const size_t slash = path.find('/');
  std::string_view encoded = path.substr(0, slash);
  if (slash != std::string_view::npos) {
    const std::string_view sub = path.substr(slash + 1);
    if (sub == "rebuild") {
      out.resource = AgentResource::kRebuild;
    } else if (sub == "memory") {
      out.resource = AgentResource::kMemory;
    } else if (sub == "turns") {
      out.resource = AgentResource::kTurns;
    } else if (sub == "segments") {
      out.resource = AgentResource::kSegments;
    } else if (sub.starts_with("segments/")) {
      out.resource = AgentResource::kSegment;
      Result<std::string> name = PercentDecode(sub.substr(std::string_view("segments/").size()));
      if (!name.ok()) return FieldError("path", name.status().message());
      if (Status valid = memory::ValidateSegmentName(*name); !valid.ok()) {
        return FieldError("path", valid.message());
      }
      out.segment = std::move(*name);
    } else {
      return NotFound("not an agent path");
    }
  }
  Result<std::string> id = PercentDecode(encoded);
  if (!id.ok()) return FieldError("path", id.status().message());
  KVMEM_RETURN_IF_ERROR(ValidateAgentId(*id, "path"));
  out.id = std::move(*id);
  return out;
}

}  // namespace kvmem::serve
