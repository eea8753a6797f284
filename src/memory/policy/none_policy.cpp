#include "memory/policy/none_policy.h"

namespace kvmem::memory {

PolicyKind NonePolicyKind() {
  PolicyKind k;
  k.name = "none";
  k.description = "keeps nothing: every turn prefills its whole prompt";
  k.parse = [](const PolicyEnv&, const Json& config) {
    return ReadConfig("none", {}, config, Json::object());
  };
  k.presets = [](const PolicyEnv&) { return Json::object(); };
  k.rows_needed = [](const PolicyEnv& env, const Json&) { return env.n_ctx; };
  k.rebuildable_from_prompt = true;
  k.create = [](const PolicyEnv& env, const Json&,
                kv::KvPool* pool) -> Result<std::unique_ptr<MemoryPolicy>> {
    return std::unique_ptr<MemoryPolicy>(std::make_unique<NonePolicy>(env, pool));
  };
  k.restore = [](const PolicyEnv& env, const Json&, kv::KvPool* pool,
                 StoredMemory stored) -> Result<std::unique_ptr<MemoryPolicy>> {
    if (stored.rows && stored.rows->n_rows() > 0) return Corrupt("a 'none' memory holds rows");
    if (!stored.state.empty()) return Corrupt("a 'none' memory has no state");
    return std::unique_ptr<MemoryPolicy>(std::make_unique<NonePolicy>(env, pool));
  };
  return k;
}

void NonePolicy::Forget() {
  seq_ = std::make_unique<kv::KvSequence>(pool_);
  tokens_.clear();
  text_.clear();
}

Status NonePolicy::Commit() {
  KVMEM_RETURN_IF_ERROR(FullPolicy::Commit());
  Forget();
  return Status::Ok();
}

void NonePolicy::Abort() { Forget(); }

}  // namespace kvmem::memory
