// The table of memory-policy kinds (after ggml's type traits): one row per policy, found by
// name. A row says what the policy is, reads and validates its config (the only validator:
// the API, the CLI, the evaluation and stored manifests all go through it), says how many KV
// rows an agent with that config needs, and creates or restores the policy object. Adding a
// policy is one folder under src/memory/ and one row in policy_table.cpp; nothing in serve/,
// store/, apps/ or memory/agents/ changes.
//
//   none     keeps nothing: every turn prefills its whole prompt (anonymous requests)
//   full     the conversation's KV cache with character-level prefix matching (semantic.md)
//   memart   MemArt block retrieval over a history that may outgrow the context
//   h2o      the full cache, each (layer, KV head) reading a budget of heavy hitters and
//            recent rows
//   epicache a fixed budget: episodes of the conversation, each a cache compressed by block
//            prefill, each request answered on the nearest one (and EpiCache's baselines)
//   intentkv the full cache pruned to a budget of history rows against the session's intent;
//            dead slots keep the prefix matching (and StreamingLLM/SnapKV/H2O, compaction)
//   keep     KEEP: named segments a client writes, cached apart and blended per request with
//            selective recomputation
//
// Thread-safety: the table is immutable; its functions are pure or create new objects.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "memory/policy/config_fields.h"
#include "memory/policy/memory_policy.h"
#include "memory/store/manifest.h"

namespace kvmem::memory {

// What the store gives back of an agent, for Restore.
struct StoredMemory {
  std::unique_ptr<kv::KvSequence> rows;  // loaded into the pool Restore gets
  std::vector<int32_t> tokens;           // (rows->n_rows())
  std::string text;
  Json state = Json::object();
};

struct PolicyKind {
  std::string name;
  std::vector<std::string> aliases;  // other names requests may use (e.g. "retrieval")
  std::string description;           // one line
  std::vector<ConfigField> fields;
  // A request's config (fields it leaves out take defaults, or a preset's values) as the
  // complete config the policy runs and the manifest stores; InvalidArgument naming the field.
  std::function<Result<Json>(const PolicyEnv&, const Json& config)> parse;
  // Named presets a config may ask for ({"NAME": {field: value}}), for this env's model.
  std::function<Json(const PolicyEnv&)> presets;
  // Rows of the pool an agent with this (parsed) config needs.
  std::function<int64_t(const PolicyEnv&, const Json& config)> rows_needed;
  // True when the rows are a cache of what the prompts resend: a stored memory this model
  // cannot use is dropped and rebuilt from the next prompt. False: the memory is more than the
  // prompt holds; such a store error fails the turn and leaves the files for a person to see.
  bool rebuildable_from_prompt = true;
  // True when the memory is named segments a client writes (MemoryPolicy::Segments).
  bool segments = false;
  // Created on a pool of rows_needed rows that outlives the policy.
  std::function<Result<std::unique_ptr<MemoryPolicy>>(const PolicyEnv&, const Json& config,
                                                      kv::KvPool* pool)>
      create;
  // From what Persist gave the store; Corrupt when the state is not this policy's.
  std::function<Result<std::unique_ptr<MemoryPolicy>>(const PolicyEnv&, const Json& config,
                                                      kv::KvPool* pool, StoredMemory stored)>
      restore;
  // Manifests written before the seam: {"mode": <an alias of this row>, settings...} as a
  // config of this policy (null: the row had no such mode).
  std::function<Result<Json>(const Json& legacy_settings)> upgrade;
};

// A row's create and restore from one factory of the policy class P:
// P::Make(env, config, pool, StoredMemory) -> Result<std::unique_ptr<P>> (create: an empty one).
template <typename P>
void SetFactory(PolicyKind* k) {
  k->restore = [](const PolicyEnv& env, const Json& config, kv::KvPool* pool,
                  StoredMemory stored) -> Result<std::unique_ptr<MemoryPolicy>> {
    KVMEM_ASSIGN_OR_RETURN(std::unique_ptr<P> p, P::Make(env, config, pool, std::move(stored)));
    return std::unique_ptr<MemoryPolicy>(std::move(p));
  };
  k->create = [restore = k->restore](const PolicyEnv& env, const Json& config,
                                     kv::KvPool* pool) {
    return restore(env, config, pool, StoredMemory{});
  };
}

// The start of a row whose rows are a cache of the prompt within one context: no config fields
// (any is refused), no presets, n_ctx rows, rebuildable from the prompt.
PolicyKind PromptCacheKind(std::string name, std::string description);

const std::vector<PolicyKind>& PolicyKinds();
// The names of the rows whose memory is segments (PolicyKind::segments), comma-separated.
std::string SegmentPolicyNames();
// By name or alias; InvalidArgument listing the valid names.
Result<const PolicyKind*> FindPolicyKind(std::string_view name);

// A policy and its parsed config, with the agent's conversation settings (store::MemoryRecord:
// server-side conversation, checkpoints kept when a request diverges).
struct MemorySpec {
  const PolicyKind* kind = nullptr;
  Json config = Json::object();
  bool server_conversation = false;
  int max_checkpoints = store::kDefaultMaxCheckpoints;
};
// A request's choice: InvalidArgument for an unknown name (listing the valid ones) or config.
Result<MemorySpec> ParseMemorySpec(const PolicyEnv& env, std::string_view policy,
                                   const Json& config);
// A manifest's record (legacy ones upgraded): Corrupt when it names no policy of the table or
// its config does not parse.
Result<MemorySpec> SpecFromRecord(const PolicyEnv& env, const store::MemoryRecord& record);
// The record a manifest stores for a policy (state from Persist).
store::MemoryRecord RecordOf(const MemorySpec& spec, Json state);

// GET /v1/policies: {"object": "list", "data": [{"name", "aliases", "description", "config":
// DescribeFields, "presets"}]} with this env's presets.
nlohmann::ordered_json DescribePolicies(const PolicyEnv& env);

}  // namespace kvmem::memory
