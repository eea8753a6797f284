#include "serve/agents_api.h"

#include <algorithm>

#include "serve/json_body.h"
#include "serve/request_fields.h"

namespace kvmem::serve {
namespace {

Json ToJson(const RetrievalTurnInfo& t) {
  Json blocks = Json::array();
  for (const RecalledBlock& b : t.blocks) {
    blocks.push_back({{"block", b.block},
                      {"first_token", b.first_token},
                      {"n_tokens", b.n_tokens},
                      {"layers", b.layers},
                      {"text", b.text}});
  }
  return {{"history_tokens", t.history_tokens}, {"retrieved_rows", t.retrieved_rows},
          {"prefill_tokens", t.prefill_tokens}, {"kv_len_decode", t.kv_len_decode},
          {"scoring_tokens", {t.scoring_begin, t.scoring_end}}, {"blocks", std::move(blocks)}};
}

Json ToJson(const AgentInfo& a) {
  Json j = {{"id", a.id},
          {"object", "agent"},
          {"tenant", a.tenant},
          {"cached_tokens", a.cached_tokens},
          {"bytes", a.bytes},
          {"tier", CacheTierName(a.tier)},
          {"kv_format", a.kv_format},
          {"memory_mode", a.memory_mode},
          {"last_used_at", a.last_used_unix}};
  if (a.last_turn) j["last_turn"] = ToJson(*a.last_turn);
  return j;
}

// A setting in [lo, hi], or unset.
Status ReadSetting(const Json& obj, std::string_view key, int64_t lo, int64_t hi,
                   std::optional<int>* out) {
  const std::string field = "retrieval." + std::string(key);
  KVMEM_ASSIGN_OR_RETURN(std::optional<int64_t> v, OptionalInt(obj, key, field));
  if (!v) return Status::Ok();
  if (*v < lo || *v > hi) {
    return FieldError(field, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  *out = static_cast<int>(*v);
  return Status::Ok();
}

}  // namespace

Result<AgentCreateRequest> ParseAgentCreateRequest(std::string_view body) {
  KVMEM_ASSIGN_OR_RETURN(Json j, ParseJsonObject(body));
  AgentCreateRequest r;
  KVMEM_ASSIGN_OR_RETURN(r.id, RequiredString(j, "id", "id"));
  KVMEM_RETURN_IF_ERROR(ValidateAgentId(r.id, "id"));
  KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> mode, OptionalString(j, "memory", "memory"));
  if (mode) r.memory_mode = *mode;
  if (r.memory_mode != "full" && r.memory_mode != "retrieval") {
    return FieldError("memory", "must be \"full\" or \"retrieval\"");
  }
  const Json* settings = FindField(j, "retrieval");
  if (settings == nullptr) return r;
  if (!settings->is_object()) return TypeError("retrieval", "an object", *settings);
  if (r.memory_mode != "retrieval") {
    return FieldError("retrieval", "settings for a memory that is not \"retrieval\"");
  }
  for (const auto& [key, value] : settings->items()) {
    if (key != "block_size" && key != "top_k" && key != "strategy" && key != "keep_first" &&
        key != "keep_last" && key != "neighbors" && key != "turn_bounded" &&
        key != "whole_turns" && key != "heads") {
      return FieldError("retrieval." + key,
                        "unknown setting (block_size, top_k, strategy, keep_first, keep_last, "
                        "neighbors, turn_bounded, whole_turns, heads)");
    }
  }
  KVMEM_RETURN_IF_ERROR(ReadSetting(*settings, "block_size", 1, 1024, &r.block_size));
  KVMEM_RETURN_IF_ERROR(ReadSetting(*settings, "top_k", 1, 4096, &r.top_k));
  KVMEM_RETURN_IF_ERROR(ReadSetting(*settings, "keep_first", 0, 65536, &r.keep_first));
  KVMEM_RETURN_IF_ERROR(ReadSetting(*settings, "keep_last", 0, 65536, &r.keep_last));
  KVMEM_RETURN_IF_ERROR(ReadSetting(*settings, "neighbors", 0, 8, &r.neighbors));
  KVMEM_ASSIGN_OR_RETURN(r.turn_bounded,
                         OptionalBool(*settings, "turn_bounded", "retrieval.turn_bounded"));
  KVMEM_ASSIGN_OR_RETURN(r.whole_turns,
                         OptionalBool(*settings, "whole_turns", "retrieval.whole_turns"));
  if (const Json* heads = FindField(*settings, "heads"); heads != nullptr) {
    if (!heads->is_array() || heads->size() > 256) {
      return TypeError("retrieval.heads", "an array of at most 256 \"LAYER.HEAD\" strings", *heads);
    }
    r.retrieval_heads.emplace();
    for (const Json& h : *heads) {
      if (!h.is_string()) return TypeError("retrieval.heads", "\"LAYER.HEAD\" strings", h);
      r.retrieval_heads->push_back(h.get<std::string>());
    }
  }
  KVMEM_ASSIGN_OR_RETURN(r.strategy, OptionalString(*settings, "strategy", "retrieval.strategy"));
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

}  // namespace kvmem::serve
