// Helpers shared by the memory tests: a temp directory removed at scope exit, whole-file reads
// and writes, KV sequences filled with random rows. Header-only.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "kv/kv_pool.h"
#include "kv/kv_sequence.h"

namespace kvmem::memory::store::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "kvmem-store-test-XXXXXX").string();
    EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Replaces path by unlinking it first: truncating a file in place makes ext4 flush it on close
// (auto_da_alloc), which would dominate tests that rewrite a file thousands of times.
inline void WriteAll(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Sorted names in dir.
inline std::vector<std::string> ListNames(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Appends n rows at positions first_pos.. to seq with random K/V in every layer.
inline void AppendRandomRows(kv::KvSequence* seq, int n, int64_t first_pos, std::mt19937* rng) {
  kv::KvPool* pool = seq->pool();
  const kv::KvGeometry& g = pool->geometry();
  auto rows = seq->AppendRows(n, first_pos);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> k(g.n_kv_heads * g.head_dim_k), v(g.n_kv_heads * g.head_dim_v);
  for (int i = 0; i < n; ++i) {
    for (int l = 0; l < g.n_layers; ++l) {
      for (float& x : k) x = dist(*rng);
      for (float& x : v) x = dist(*rng);
      pool->WriteToken((*rows)[i], l, k.data(), v.data());
    }
    pool->set_rotated_pos((*rows)[i], first_pos + i);
  }
}

}  // namespace kvmem::memory::store::testing
