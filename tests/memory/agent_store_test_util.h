// Helpers of the AgentStore tests: a store on a temp directory, sequences compared row by row,
// manifests read back. Header-only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "memory/store/agent_store.h"
#include "memory/store/hash.h"
#include "memory/store/manifest.h"
#include "test_util.h"

namespace kvmem::memory::store::testing {

inline const std::string kFingerprint = Xxh128Hex(std::string_view("model A"));
inline constexpr int32_t kVocab = 1000;
inline constexpr kv::KvFormat kAllFormats[] = {kv::KvFormat::kF16, kv::KvFormat::kQ8_0,
                                               kv::KvFormat::kQ4_0, kv::KvFormat::kKivi4};

// 48 rows: a whole block keeps 16 kivi4 rows in staging (48 = 32 + 16).
inline kv::KvGeometry Geometry(int block_rows = 48) {
  return {/*n_layers=*/3, /*n_kv_heads=*/2, /*head_dim_k=*/32, /*head_dim_v=*/32, block_rows};
}

inline AgentStore OpenStore(const TempDir& dir, const std::string& fp = kFingerprint) {
  Result<AgentStore> s = AgentStore::Open({dir.path(), fp, kVocab});
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

inline std::vector<int32_t> Tokens(int64_t n, int seed = 0) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 7 + seed) % kVocab);
  return t;
}

// Same rows, byte for byte: raw layers of whole blocks, the written part of every layer read
// back through the pool, kivi4 staging rows in use, positions and the view's runs.
inline void ExpectSameRows(const kv::KvSequence& a, const kv::KvSequence& b) {
  ASSERT_EQ(a.n_rows(), b.n_rows());
  ASSERT_EQ(a.blocks().size(), b.blocks().size());
  const kv::KvPool& pa = *a.pool();
  const kv::KvPool& pb = *b.pool();
  const kv::KvGeometry& g = pa.geometry();
  std::vector<float> ka(g.n_kv_heads * (g.head_dim_k + g.head_dim_v)), kb(ka.size());
  for (size_t i = 0; i < a.blocks().size(); ++i) {
    const int32_t ba = a.blocks()[i], bb = b.blocks()[i];
    const int32_t n =
        static_cast<int32_t>(std::min<int64_t>(g.block_rows, a.n_rows() - i * g.block_rows));
    for (int l = 0; l < g.n_layers; ++l) {
      SCOPED_TRACE("block " + std::to_string(i) + " layer " + std::to_string(l));
      ASSERT_EQ(pa.has_layer(ba, l), pb.has_layer(bb, l));
      if (!pa.has_layer(ba, l)) continue;
      EXPECT_EQ(pb.written_rows(bb, l), n);
      const kv::KvPool::RawLayer ra = pa.raw_layer(ba, l), rb = pb.raw_layer(bb, l);
      ASSERT_EQ(ra.data.size(), rb.data.size());
      if (n == g.block_rows) {
        EXPECT_EQ(std::memcmp(ra.data.data(), rb.data.data(), ra.data.size()), 0);
      }
      ASSERT_EQ(ra.staging.size(), rb.staging.size());
      const size_t used = static_cast<size_t>(n % 32) * g.head_dim_k;
      for (int h = 0; h < g.n_kv_heads && !ra.staging.empty(); ++h) {
        const size_t off = static_cast<size_t>(h) * 32 * g.head_dim_k;
        EXPECT_EQ(std::memcmp(&ra.staging[off], &rb.staging[off], used * 2), 0);
      }
      for (int32_t r = 0; r < n; ++r) {
        pa.ReadToken({ba, r}, l, ka.data(), ka.data() + g.n_kv_heads * g.head_dim_k);
        pb.ReadToken({bb, r}, l, kb.data(), kb.data() + g.n_kv_heads * g.head_dim_k);
        ASSERT_EQ(std::memcmp(ka.data(), kb.data(), ka.size() * 4), 0) << "row " << r;
      }
    }
    for (int32_t r = 0; r < n; ++r) EXPECT_EQ(pa.rotated_pos({ba, r}), pb.rotated_pos({bb, r}));
  }
  for (int l = 0; l < g.n_layers; ++l) {
    const auto& va = a.view().layer(l);
    const auto& vb = b.view().layer(l);
    ASSERT_EQ(va.size(), vb.size()) << "layer " << l;
    for (size_t k = 0; k < va.size(); ++k) {
      EXPECT_EQ(va[k].first_row, vb[k].first_row);
      EXPECT_EQ(va[k].n_rows, vb[k].n_rows);
      EXPECT_EQ(va[k].first_pos, vb[k].first_pos);
    }
    EXPECT_EQ(a.released_through(l), b.released_through(l));
  }
}

inline std::vector<std::string> BlockFiles(const AgentManifest& m) {
  std::vector<std::string> f;
  for (const BlockEntry& b : m.blocks) f.push_back(b.file);
  return f;
}

inline AgentManifest Manifest(const AgentStore& store, const AgentKey& key) {
  const std::vector<uint8_t> bytes = testing::ReadAll(store.AgentDir(key) + "/manifest.json");
  Result<AgentManifest> m =
      ParseManifest({reinterpret_cast<const char*>(bytes.data()), bytes.size()});
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : AgentManifest{};
}

}  // namespace kvmem::memory::store::testing
