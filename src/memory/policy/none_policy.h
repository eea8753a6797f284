// The `none` memory policy: keeps nothing. Every turn prefills its whole prompt and the rows are
// dropped when it ends: anonymous requests, and agents that want a stateless turn. Also the
// policy the runtime's own tests run on.
// Thread-safety: as MemoryPolicy.
#pragma once

#include "memory/full/full_policy.h"
#include "memory/policy/policy_table.h"

namespace kvmem::memory {

PolicyKind NonePolicyKind();

class NonePolicy : public FullPolicy {
 public:
  NonePolicy(const PolicyEnv& env, kv::KvPool* pool) : FullPolicy(env, pool) {}
  // Corrupt when `stored` holds rows or state.
  static Result<std::unique_ptr<NonePolicy>> Make(const PolicyEnv& env, const Json& config,
                                                  kv::KvPool* pool, StoredMemory stored);
  Status Commit() override;
  void Abort() override;

 private:
  void Forget();
};

}  // namespace kvmem::memory
