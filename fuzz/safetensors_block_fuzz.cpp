// libFuzzer target for KV block files as the agent store reads them: the input (after a first
// byte that picks the live pool, store_fuzz_config.h) is written as the agent's one block file,
// beside a manifest that names it with its true size and checksum, and AgentStore::Load reads
// it back: safetensors framing, metadata, tensor checks, then the copy into the pool. A hostile
// block file whose manifest was rewritten to match is the case the checksum cannot catch.
// When the load succeeds every row of every layer kept is read back through the pool, so ASan
// flags any byte the load left outside what it allocated. See fuzz/README.md.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kv/kv_sequence.h"
#include "memory/store/agent_store.h"
#include "memory/store/manifest.h"
#include "store_fuzz_config.h"

namespace kvmem::fuzz {
namespace {

using memory::store::AgentManifest;
using memory::store::AgentStore;
using memory::store::BlockEntry;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

void WriteFile(const std::string& path, std::span<const uint8_t> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  Check(static_cast<bool>(out));
}

// One store on a private directory (tmpfs when there is one: every input is two small files),
// removed at exit, and one pool per config.
struct Fixture {
  std::string root;
  std::unique_ptr<AgentStore> store;
  std::string agent_dir;
  std::vector<std::unique_ptr<kv::KvPool>> pools;

  Fixture() {
    const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    root = std::string(base) + "/kvmem-block-fuzz-" + std::to_string(getpid());
    std::filesystem::remove_all(root);
    auto s = AgentStore::Open({root, FuzzFingerprint(), kFuzzVocab});
    Check(s.ok());
    store = std::make_unique<AgentStore>(std::move(*s));
    agent_dir = store->AgentDir(FuzzAgent());
    std::filesystem::create_directories(agent_dir);
    for (const BlockConfig& c : BlockConfigs()) {
      pools.push_back(std::make_unique<kv::KvPool>(BlockGeometry(), 2, c.formats));
    }
  }
  ~Fixture() {
    store.reset();
    std::filesystem::remove_all(root);
  }
};

AgentManifest ManifestFor(const BlockConfig& c, std::span<const uint8_t> file) {
  AgentManifest m;
  m.key = FuzzAgent();
  m.model_fingerprint = FuzzFingerprint();
  m.formats = c.formats;
  m.geometry = BlockGeometry();
  m.tokens = FuzzTokens(c.n_rows);
  m.text = "fuzz";
  BlockEntry b;
  b.checksum = memory::store::Xxh128Hex(file);
  b.file = memory::store::BlockFileName(b.checksum);
  b.n_rows = c.n_rows;
  b.first_pos = 0;
  b.bytes = file.size();
  if (c.release_layer0) b.released_layers = {0};
  m.blocks.push_back(std::move(b));
  return m;
}

// Every row the load wrote, dequantized (ASan watches the reads).
void ReadBack(const kv::KvSequence& seq, const BlockConfig& c) {
  const kv::KvPool& pool = *seq.pool();
  const kv::KvGeometry& g = pool.geometry();
  Check(seq.n_rows() == c.n_rows && seq.blocks().size() == 1);
  const int32_t block = seq.blocks()[0];
  std::vector<float> k(g.n_kv_heads * g.head_dim_k), v(g.n_kv_heads * g.head_dim_v);
  for (int l = 0; l < g.n_layers; ++l) {
    Check(pool.has_layer(block, l) == !(c.release_layer0 && l == 0));
    if (!pool.has_layer(block, l)) continue;
    Check(pool.written_rows(block, l) == c.n_rows);
    for (int32_t r = 0; r < c.n_rows; ++r) pool.ReadToken({block, r}, l, k.data(), v.data());
  }
}

}  // namespace
}  // namespace kvmem::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvmem::fuzz;
  static Fixture* fx = new Fixture();
  static const bool cleanup = [] { return std::atexit([] { delete fx; }) == 0; }();
  (void)cleanup;
  if (size < 1) return 0;
  const size_t index = data[0] % BlockConfigs().size();
  const BlockConfig& c = BlockConfigs()[index];
  const std::span<const uint8_t> file(data + 1, size - 1);
  const AgentManifest m = ManifestFor(c, file);
  const std::string block_path = fx->agent_dir + "/" + m.blocks[0].file;
  WriteFile(block_path, file);
  const std::string manifest = kvmem::memory::store::ManifestToJson(m);
  WriteFile(fx->agent_dir + "/" + std::string(kvmem::memory::store::kManifestName),
            {reinterpret_cast<const uint8_t*>(manifest.data()), manifest.size()});

  kvmem::kv::KvSequence seq(fx->pools[index].get());
  kvmem::memory::store::AgentRecord record;
  kvmem::Status st = fx->store->Load(FuzzAgent(), &seq, &record);
  if (st.ok()) {
    ReadBack(seq, c);
    Check(record.tokens == m.tokens);
  } else {
    Check(!st.message().empty() && seq.n_rows() == 0);
  }
  seq.Clear();
  std::filesystem::remove(block_path);
  return 0;
}
