// store_load_bench: what a warm agent load costs beyond hot, AgentStore::Load alone. A store holds
// one agent of N rows of random KV in a model's geometry; each repetition loads it into a fresh
// pool over prefaulted layer chunks (as AgentRuntime does) with the files in the page cache, and
// is timed against two floors measured in the same run: copying the same bytes from one buffer
// to another (memcpy), and reading the block files into one buffer (read()).
//
//   store_load_bench [--rows 7168] [--model smollm2|gemma3] [--format q8_0] [--reps 15]
//
// Prints the median of each, the load's rate and its ratio to both floors.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kv/kv_pool.h"
#include "kv/kv_sequence.h"
#include "kv/layer_chunks.h"
#include "memory/store/agent_store.h"
#include "memory/store/hash.h"

namespace {

using namespace kvmem;
using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "store_load_bench: %s\n", what.c_str());
  std::exit(1);
}

// The KV geometry of the models bench/agent_resume.py measures (block rows as the runtime's).
kv::KvGeometry Geometry(const std::string& model) {
  if (model == "smollm2") return {30, 3, 64, 64, 256};   // SmolLM2-135M
  if (model == "gemma3") return {18, 1, 256, 256, 256};  // Gemma-3 270M
  Die("unknown --model " + model + " (smollm2, gemma3)");
}

}  // namespace

int main(int argc, char** argv) {
  int rows = 7168, reps = 15;
  std::string model = "smollm2", format = "q8_0";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--rows") {
      rows = std::atoi(argv[i + 1]);
    } else if (a == "--reps") {
      reps = std::atoi(argv[i + 1]);
    } else if (a == "--model") {
      model = argv[i + 1];
    } else if (a == "--format") {
      format = argv[i + 1];
    } else {
      Die("unknown flag " + a);
    }
  }
  if (rows < 1 || reps < 1) Die("--rows and --reps must be positive");
  const kv::KvGeometry g = Geometry(model);
  Result<kv::KvFormat> f = kv::ParseKvFormat(format);
  if (!f.ok()) Die(f.status().ToString());
  const kv::KvFormats formats{*f, *f};
  const int max_blocks = (rows + g.block_rows - 1) / g.block_rows;

  const std::string dir =
      (std::filesystem::temp_directory_path() / ("kvmem-load-bench-" + std::to_string(getpid())))
          .string();
  const std::string fingerprint = memory::store::Xxh128Hex(std::string_view("bench model"));
  Result<memory::store::AgentStore> store =
      memory::store::AgentStore::Open({dir, fingerprint, 1 << 20});
  if (!store.ok()) Die(store.status().ToString());
  const memory::store::AgentKey key{"bench", "agent"};

  // Layer memory as the runtime keeps it: chunks written once, reused by every load.
  kv::LayerChunks chunks(kv::KvPool(g, 1, formats).layer_bytes(), size_t{4} << 30);
  {
    kv::KvPool pool(g, max_blocks, formats, &chunks);
    kv::KvSequence seq(&pool);
    Result<std::vector<kv::RowRef>> refs = seq.AppendRows(rows, 0);
    if (!refs.ok()) Die(refs.status().ToString());
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> k(g.n_kv_heads * g.head_dim_k), v(g.n_kv_heads * g.head_dim_v);
    for (int r = 0; r < rows; ++r) {
      for (int l = 0; l < g.n_layers; ++l) {
        for (float& x : k) x = dist(rng);
        for (float& x : v) x = dist(rng);
        pool.WriteToken((*refs)[r], l, k.data(), v.data());
      }
      pool.set_rotated_pos((*refs)[r], r);
    }
    std::vector<int32_t> tokens(rows);
    for (int r = 0; r < rows; ++r) tokens[r] = r % 50000;
    Result<memory::store::SaveStats> saved = store->Save(key, seq, tokens, "");
    if (!saved.ok()) Die(saved.status().ToString());
  }

  std::vector<std::string> files;
  size_t bytes = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".safetensors") {
      files.push_back(e.path().string());
      bytes += e.file_size();
    }
  }
  std::vector<uint8_t> src(bytes, 1), dst(bytes, 2);

  std::vector<double> load_ms, memcpy_ms, read_ms;
  for (int rep = 0; rep <= reps; ++rep) {  // rep 0 warms the page cache and the chunks
    {
      kv::KvPool pool(g, max_blocks, formats, &chunks);
      kv::KvSequence seq(&pool);
      memory::store::AgentRecord rec;
      const auto t0 = Clock::now();
      Status st = store->Load(key, &seq, &rec);
      const double ms = Ms(t0);
      if (!st.ok()) Die(st.ToString());
      if (seq.n_rows() != rows) Die("loaded " + std::to_string(seq.n_rows()) + " rows");
      if (rep > 0) load_ms.push_back(ms);
    }
    auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    if (rep > 0) memcpy_ms.push_back(Ms(t0));
    t0 = Clock::now();
    size_t at = 0;
    for (const std::string& path : files) {
      const int fd = ::open(path.c_str(), O_RDONLY);
      if (fd < 0) Die("open " + path);
      for (ssize_t n; (n = ::read(fd, dst.data() + at, bytes - at)) > 0;) at += n;
      ::close(fd);
    }
    if (rep > 0) read_ms.push_back(Ms(t0));
    if (at != bytes) Die("the block files changed size");
  }
  std::filesystem::remove_all(dir);

  const double load = Median(load_ms), copy = Median(memcpy_ms), read = Median(read_ms);
  std::printf("store load, %s geometry, %s, %d rows: %zu block files, %.1f MiB, median of %d\n",
              model.c_str(), format.c_str(), rows, files.size(), bytes / 1048576.0, reps);
  std::printf("%-26s %8.2f ms  %6.2f GB/s\n", "AgentStore::Load", load, bytes / load / 1e6);
  std::printf("%-26s %8.2f ms  %6.2f GB/s  load/memcpy %.2fx\n", "memcpy (floor)", copy,
              bytes / copy / 1e6, load / copy);
  std::printf("%-26s %8.2f ms  %6.2f GB/s  load/read %.2fx\n", "read() the files (floor)", read,
              bytes / read / 1e6, load / read);
  return 0;
}
