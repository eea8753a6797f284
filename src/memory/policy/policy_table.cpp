#include "memory/policy/policy_table.h"

#include "memory/episodic/epicache_policy.h"
#include "memory/eviction/h2o_policy.h"
#include "memory/full/full_policy.h"
#include "memory/intent/intent_policy.h"
#include "memory/policy/none_policy.h"
#include "memory/retrieval/memart_policy.h"
#include "memory/segments/keep_policy.h"

namespace kvmem::memory {
namespace {

PolicyKind FullPolicyKind() {
  PolicyKind k = PromptCacheKind(
      "full",
      "the conversation's KV cache: a turn keeps the prefix its prompt shares with the cache "
      "(character-level matching) and prefills the rest; the conversation must fit the context");
  k.restore = [](const PolicyEnv& env, const Json&, kv::KvPool* pool,
                 StoredMemory stored) -> Result<std::unique_ptr<MemoryPolicy>> {
    if (!stored.state.empty()) return Corrupt("a 'full' memory has no state");
    return std::unique_ptr<MemoryPolicy>(std::make_unique<FullPolicy>(
        env, pool, std::move(stored.rows), std::move(stored.tokens), std::move(stored.text)));
  };
  k.create = [](const PolicyEnv& env, const Json&, kv::KvPool* pool) {
    return Result<std::unique_ptr<MemoryPolicy>>(std::make_unique<FullPolicy>(env, pool));
  };
  k.upgrade = [](const Json&) -> Result<Json> { return Json::object(); };
  return k;
}

std::string Names() {
  std::string s;
  for (const PolicyKind& k : PolicyKinds()) s += (s.empty() ? "" : ", ") + k.name;
  return s;
}

}  // namespace

PolicyKind PromptCacheKind(std::string name, std::string description) {
  PolicyKind k;
  k.name = std::move(name);
  k.description = std::move(description);
  k.parse = [who = k.name](const PolicyEnv&, const Json& config) {
    return ReadConfig(who, {}, config, Json::object());
  };
  k.presets = [](const PolicyEnv&) { return Json::object(); };
  k.rows_needed = [](const PolicyEnv& env, const Json&) { return env.n_ctx; };
  k.rebuildable_from_prompt = true;
  return k;
}

const std::vector<PolicyKind>& PolicyKinds() {
  // One row per policy.
  static const std::vector<PolicyKind> kinds = {
      NonePolicyKind(),     FullPolicyKind(),     MemArtPolicyKind(), H2oPolicyKind(),
      EpiCachePolicyKind(), IntentKvPolicyKind(), KeepPolicyKind()};
  return kinds;
}

std::string SegmentPolicyNames() {
  std::string s;
  for (const PolicyKind& k : PolicyKinds()) {
    if (k.segments) s += (s.empty() ? "" : ", ") + k.name;
  }
  return s;
}

Result<const PolicyKind*> FindPolicyKind(std::string_view name) {
  for (const PolicyKind& k : PolicyKinds()) {
    if (k.name == name) return &k;
    for (const std::string& a : k.aliases) {
      if (a == name) return &k;
    }
  }
  return InvalidArgument("unknown memory policy '" + std::string(name) + "' (policies: " +
                         Names() + ")");
}

Result<MemorySpec> ParseMemorySpec(const PolicyEnv& env, std::string_view policy,
                                   const Json& config) {
  KVMEM_ASSIGN_OR_RETURN(const PolicyKind* kind, FindPolicyKind(policy));
  KVMEM_ASSIGN_OR_RETURN(Json parsed, kind->parse(env, config.is_null() ? Json::object() : config));
  return MemorySpec{kind, std::move(parsed)};
}

Result<MemorySpec> SpecFromRecord(const PolicyEnv& env, const store::MemoryRecord& record) {
  Result<const PolicyKind*> kind = FindPolicyKind(record.policy);
  if (!kind.ok()) return Corrupt("stored " + kind.status().message());
  Json config = record.config;
  if (record.legacy) {
    if (!(*kind)->upgrade) return Corrupt("stored memory mode '" + record.policy + "'");
    Result<Json> upgraded = (*kind)->upgrade(record.config);
    if (!upgraded.ok()) return Corrupt("stored " + upgraded.status().message());
    config = std::move(*upgraded);
  }
  Result<Json> parsed = (*kind)->parse(env, config);
  if (!parsed.ok()) return Corrupt("stored " + parsed.status().message());
  return MemorySpec{*kind, std::move(*parsed), record.server_conversation,
                    record.max_checkpoints};
}

store::MemoryRecord RecordOf(const MemorySpec& spec, Json state) {
  store::MemoryRecord r;
  r.policy = spec.kind->name;
  r.config = spec.config;
  r.state = std::move(state);
  r.server_conversation = spec.server_conversation;
  r.max_checkpoints = spec.max_checkpoints;
  return r;
}

nlohmann::ordered_json DescribePolicies(const PolicyEnv& env) {
  nlohmann::ordered_json data = nlohmann::ordered_json::array();
  for (const PolicyKind& k : PolicyKinds()) {
    nlohmann::ordered_json p;
    p["name"] = k.name;
    p["aliases"] = k.aliases;
    p["description"] = k.description;
    p["config"] = DescribeFields(k.fields);
    p["presets"] = k.presets(env);
    data.push_back(std::move(p));
  }
  return {{"object", "list"}, {"data", std::move(data)}};
}

}  // namespace kvmem::memory
