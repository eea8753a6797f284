#include "memory/policy/none_policy.h"

namespace kvmem::memory {

PolicyKind NonePolicyKind() {
  PolicyKind k =
      PromptCacheKind("none", "keeps nothing: every turn prefills its whole prompt");
  SetFactory<NonePolicy>(&k);
  return k;
}

Result<std::unique_ptr<NonePolicy>> NonePolicy::Make(const PolicyEnv& env, const Json&,
                                                     kv::KvPool* pool, StoredMemory stored) {
  if (stored.rows && stored.rows->n_rows() > 0) return Corrupt("a 'none' memory holds rows");
  if (!stored.state.empty()) return Corrupt("a 'none' memory has no state");
  return std::make_unique<NonePolicy>(env, pool);
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
