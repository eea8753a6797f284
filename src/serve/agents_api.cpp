#include "serve/agents_api.h"

#include <algorithm>

#include "memory/policy/segments.h"
#include "memory/store/manifest.h"
#include "serve/json_body.h"
#include "serve/request_fields.h"

namespace kvmem::serve {
namespace {

Json ToJson(const AgentInfo& a) {
  Json checkpoints = Json::array();
  for (const CheckpointInfo& c : a.checkpoints) {
    checkpoints.push_back({{"id", c.id},
                           {"cached_tokens", c.tokens},
                           {"bytes", c.bytes},
                           {"last_used_at", c.last_used_unix}});
  }
  return {{"id", a.id},
          {"object", "agent"},
          {"tenant", a.tenant},
          {"cached_tokens", a.cached_tokens},
          {"bytes", a.bytes},
          {"tier", TierName(a.tier)},
          {"kv_format", a.kv_format},
          {"memory", {{"policy", a.policy}, {"config", a.config}}},
          {"conversation", a.server_conversation ? "server" : "client"},
          {"max_checkpoints", a.max_checkpoints},
          {"checkpoints", std::move(checkpoints)},
          {"last_used_at", a.last_used_unix},
          {"last_turn", a.last_turn}};
}

// "conversation" and "max_checkpoints".
Status ReadConversationSettings(const Json& j, AgentCreateRequest* r) {
  KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> conversation,
                         OptionalString(j, "conversation", "conversation"));
  if (conversation && *conversation != "client" && *conversation != "server") {
    return FieldError("conversation", "must be \"client\" or \"server\"");
  }
  r->server_conversation = conversation == "server";
  KVMEM_ASSIGN_OR_RETURN(std::optional<int64_t> max,
                         OptionalInt(j, "max_checkpoints", "max_checkpoints"));
  if (max && (*max < 0 || *max > memory::store::kMaxCheckpoints)) {
    return FieldError("max_checkpoints",
                      "must be 0.." + std::to_string(memory::store::kMaxCheckpoints));
  }
  if (max) r->max_checkpoints = static_cast<int>(*max);
  return Status::Ok();
}

// {"memory": {"policy": NAME, "config": {...}}}.
Status ReadMemoryObject(const Json& memory, AgentCreateRequest* r) {
  for (const auto& [key, value] : memory.items()) {
    if (key != "policy" && key != "config") {
      return FieldError("memory." + key, "unknown field (policy, config)");
    }
  }
  KVMEM_ASSIGN_OR_RETURN(r->policy, RequiredString(memory, "policy", "memory.policy"));
  if (const Json* config = FindField(memory, "config"); config != nullptr) {
    if (!config->is_object()) return TypeError("memory.config", "an object", *config);
    r->config = *config;
  }
  return Status::Ok();
}

}  // namespace

Result<AgentCreateRequest> ParseAgentCreateRequest(std::string_view body) {
  KVMEM_ASSIGN_OR_RETURN(Json j, ParseJsonObject(body));
  AgentCreateRequest r;
  KVMEM_ASSIGN_OR_RETURN(r.id, RequiredString(j, "id", "id"));
  KVMEM_RETURN_IF_ERROR(ValidateAgentId(r.id, "id"));
  KVMEM_RETURN_IF_ERROR(ReadConversationSettings(j, &r));
  const Json* memory = FindField(j, "memory");
  const Json* settings = FindField(j, "retrieval");
  if (memory != nullptr && memory->is_object()) {
    if (settings != nullptr) {
      return FieldError("retrieval", "goes in memory.config when memory is an object");
    }
    KVMEM_RETURN_IF_ERROR(ReadMemoryObject(*memory, &r));
    return r;
  }
  // The shape before policies: "memory": NAME, its settings under "retrieval".
  KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> name, OptionalString(j, "memory", "memory"));
  if (name) r.policy = *name;
  if (settings != nullptr) {
    if (!settings->is_object()) return TypeError("retrieval", "an object", *settings);
    if (r.policy != "retrieval") {
      return FieldError("retrieval", "settings for a memory that is not \"retrieval\"");
    }
    r.config = *settings;
  }
  return r;
}

std::string AgentJson(const AgentInfo& agent) { return DumpJson(ToJson(agent)); }

std::string AgentListJson(std::vector<AgentInfo> agents) {
  std::sort(agents.begin(), agents.end(),
            [](const AgentInfo& a, const AgentInfo& b) { return a.id < b.id; });
  Json data = Json::array();
  for (const AgentInfo& a : agents) data.push_back(ToJson(a));
  return DumpJson({{"object", "list"}, {"data", std::move(data)}});
}

std::string AgentDeletedJson(const std::string& id) {
  return DumpJson({{"id", id}, {"object", "agent.deleted"}, {"deleted", true}});
}

namespace {

Json WithSegmentObject(Json segment) {
  if (segment.is_object()) segment["object"] = "agent.segment";
  return segment;
}

}  // namespace

Result<std::string> ParseSegmentPutRequest(std::string_view body) {
  KVMEM_ASSIGN_OR_RETURN(Json j, ParseJsonObject(body));
  for (const auto& [key, value] : j.items()) {
    if (key != "text") return FieldError(key, "unknown field (text)");
  }
  KVMEM_ASSIGN_OR_RETURN(std::string text, RequiredString(j, "text", "text"));
  if (Status valid = memory::ValidateSegmentText(text); !valid.ok()) {
    return FieldError("text", valid.message());
  }
  return text;
}

std::string SegmentJson(const Json& segment) { return DumpJson(WithSegmentObject(segment)); }

std::string SegmentListJson(const Json& segments) {
  Json data = Json::array();
  if (segments.is_array()) {
    for (const Json& s : segments) data.push_back(WithSegmentObject(s));
  }
  return DumpJson({{"object", "list"}, {"data", std::move(data)}});
}

std::string SegmentDeletedJson(const std::string& name) {
  return DumpJson({{"name", name}, {"object", "agent.segment.deleted"}, {"deleted", true}});
}

}  // namespace kvmem::serve
