// Writes seed corpora for safetensors_block_fuzz and manifest_fuzz by saving real agents
// through AgentStore: <dir>/block/ gets each BlockConfig's block file behind its config byte,
// <dir>/manifest/ the manifests of those saves (one per memory policy record too).
// Usage: store_fuzz_seeds <dir>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "kv/kv_sequence.h"
#include "memory/store/agent_store.h"
#include "store_fuzz_config.h"

namespace {

using kvmem::fuzz::BlockConfig;
using kvmem::memory::store::AgentStore;
using kvmem::memory::store::Json;
using kvmem::memory::store::MemoryRecord;

std::string ReadAll(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool WriteAll(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

// Saves one agent of config c with random rows; returns its directory.
kvmem::Result<std::string> SaveAgent(AgentStore& store, const BlockConfig& c,
                                     const MemoryRecord& memory, std::mt19937& rng) {
  kvmem::kv::KvPool pool(kvmem::fuzz::BlockGeometry(), 2, c.formats);
  kvmem::kv::KvSequence seq(&pool);
  KVMEM_ASSIGN_OR_RETURN(std::vector<kvmem::kv::RowRef> rows, seq.AppendRows(c.n_rows, 0));
  const kvmem::kv::KvGeometry& g = pool.geometry();
  std::normal_distribution<float> normal;
  std::vector<float> k(g.n_kv_heads * g.head_dim_k), v(g.n_kv_heads * g.head_dim_v);
  // The forward pass records where it rotated each key; these rows sit at positions 0.. .
  for (size_t i = 0; i < rows.size(); ++i) pool.set_rotated_pos(rows[i], static_cast<int64_t>(i));
  for (int l = 0; l < g.n_layers; ++l) {
    for (kvmem::kv::RowRef r : rows) {
      for (float& x : k) x = normal(rng);
      for (float& x : v) x = normal(rng);
      pool.WriteToken(r, l, k.data(), v.data());
    }
  }
  if (c.release_layer0) seq.ReleaseStorage(0, 0);
  const std::vector<int32_t> tokens = kvmem::fuzz::FuzzTokens(c.n_rows);
  KVMEM_RETURN_IF_ERROR(
      store.Save(kvmem::fuzz::FuzzAgent(), seq, tokens, "fuzz", {}, memory).status());
  return store.AgentDir(kvmem::fuzz::FuzzAgent());
}

int Run(const std::filesystem::path& out) {
  // The store the agents are saved in, removed on every way out.
  struct TempRoot {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("kvmem-store-seeds-" + std::to_string(getpid()));
    ~TempRoot() { std::filesystem::remove_all(path); }
  } temp;
  const std::filesystem::path& root = temp.path;
  auto opened =
      AgentStore::Open({root.string(), kvmem::fuzz::FuzzFingerprint(), kvmem::fuzz::kFuzzVocab});
  if (!opened.ok()) {
    std::fprintf(stderr, "%s\n", opened.status().ToString().c_str());
    return 1;
  }
  AgentStore store = std::move(*opened);
  std::filesystem::create_directories(out / "block");
  std::filesystem::create_directories(out / "manifest");
  const std::vector<MemoryRecord> records = {
      {},
      {"memart", Json{{"top_k", 32}, {"strategy", "softmax-sum"}}, Json::object(), false},
      {"h2o", Json{{"budget", 64}}, Json::object(), false},
      {"epicache", Json{{"budget", 128}, {"scoring", "keydiff"}}, Json::object(), false},
      {"retrieval", Json{{"top_k", 8}}, Json::object(), true},
  };
  std::mt19937 rng(7);
  int written = 0;
  for (size_t i = 0; i < kvmem::fuzz::BlockConfigs().size(); ++i) {
    const BlockConfig& c = kvmem::fuzz::BlockConfigs()[i];
    const MemoryRecord& memory = records[i % records.size()];
    auto dir = SaveAgent(store, c, memory, rng);
    if (!dir.ok()) {
      std::fprintf(stderr, "config %zu: %s\n", i, dir.status().ToString().c_str());
      return 1;
    }
    for (const auto& f : std::filesystem::directory_iterator(*dir)) {
      const std::string name = f.path().filename().string();
      const std::string bytes = ReadAll(f.path());
      const bool ok =
          name == "manifest.json"
              ? WriteAll(out / "manifest" / ("seed" + std::to_string(i) + ".json"), bytes)
              : WriteAll(out / "block" / ("seed" + std::to_string(i)),
                         std::string(1, static_cast<char>(i)) + bytes);
      if (!ok) return 1;
      ++written;
    }
  }
  std::printf("wrote %d seeds to %s\n", written, out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dir>\n", argv[0]);
    return 2;
  }
  return Run(argv[1]);
}
