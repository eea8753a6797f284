// What safetensors_block_fuzz and its seed writer (make_store_seeds.cpp) agree on: the live
// pools a block file is loaded into. An input's first byte picks one of kBlockConfigs; the
// manifest the target writes beside the block names that config's formats, rows and released
// layers, so each seed decodes all the way into the pool.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kv/kv_format.h"
#include "kv/kv_pool.h"
#include "memory/store/agent_id.h"
#include "memory/store/hash.h"

namespace kvmem::fuzz {

struct BlockConfig {
  kv::KvFormats formats;
  int32_t n_rows;       // rows of the agent's one block (< block_rows: a partial block)
  bool release_layer0;  // layer 0 stored as released (whole blocks only)
};

// 48 rows per block, as the store's tests: a whole kivi4 block keeps 16 rows in f16 staging.
inline kv::KvGeometry BlockGeometry() {
  return {/*n_layers=*/2, /*n_kv_heads=*/1, /*head_dim_k=*/32, /*head_dim_v=*/32,
          /*block_rows=*/48};
}

inline const std::vector<BlockConfig>& BlockConfigs() {
  using kv::KvFormat;
  static const std::vector<BlockConfig> configs = {
      {{KvFormat::kF16, KvFormat::kF16}, 48, false},
      {{KvFormat::kQ8_0, KvFormat::kQ8_0}, 48, false},
      {{KvFormat::kQ4_0, KvFormat::kF16}, 20, false},
      {{KvFormat::kKivi4, KvFormat::kKivi4}, 48, false},
      {{KvFormat::kKivi4, KvFormat::kQ8_0}, 40, false},
      {{KvFormat::kF16, KvFormat::kQ8_0}, 48, true},
  };
  return configs;
}

inline const memory::store::AgentKey& FuzzAgent() {
  static const memory::store::AgentKey key{"fuzz", "agent"};
  return key;
}
inline const std::string& FuzzFingerprint() {
  static const std::string fp = memory::store::Xxh128Hex(std::string_view("fuzz model"));
  return fp;
}
inline constexpr int32_t kFuzzVocab = 1000;

// Token ids and positions of the agent's rows: row r is token r at position r.
inline std::vector<int32_t> FuzzTokens(int32_t n_rows) {
  std::vector<int32_t> t(n_rows);
  for (int32_t r = 0; r < n_rows; ++r) t[r] = r;
  return t;
}

}  // namespace kvmem::fuzz
