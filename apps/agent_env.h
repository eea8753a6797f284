// What `kvmem serve`, `kvmem chat` and `kvmem inspect` share: the model, its tokenizer, the
// agent store for that model, and the agent runtime over them, opened from command-line options.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "core/status.h"
#include "core/thread_pool.h"
#include "memory/agents/agent_runtime.h"
#include "memory/store/agent_store.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::app {

struct AgentEnvOptions {
  std::string model;
  std::string store_dir;          // empty: $XDG_DATA_HOME/kvmem
  bool no_store = false;          // keep agents in RAM only
  // A Redis store's local block cache: empty for DefaultStoreCacheDir(), "none" for none.
  std::string store_cache;
  int64_t store_cache_mib = 4096;
  std::string kv_format = "q8_0";  // FORMAT or K:V
  int threads = 0;                // 0: DefaultThreads()
  int64_t n_ctx = 0;              // per agent; 0: the model's training context
  int64_t hot_budget_mib = 2048;
  int64_t prefault_mib = 256;  // KV memory written at start-up (kvmem serve)
  int64_t max_history_tokens = int64_t{1} << 17;  // bound of histories beyond the context
  // The prefix cache of requests without an agent (AgentRuntimeOptions); 0: none.
  int64_t prefix_cache_bytes = int64_t{256} << 20;
  // The memory policy of agents created without one (AgentRuntime::SetDefaultMemory).
  std::string memory = "full";
  std::string memory_config = "{}";  // JSON object
  // The sentence encoder policies cluster and route text with; empty: the installed
  // all-MiniLM-L6-v2 when present (else none; a policy that needs one refuses with how to
  // install it).
  std::string embed_model;
};

// Adds -m, --store, --store-cache, --store-cache-mib, --no-store, --kv-format, -t, -c, --hot-mib,
// --max-history, --prefault-mib,
// --embed-model to a subcommand.
void AddAgentEnvOptions(CLI::App* cmd, AgentEnvOptions* o);
// Adds --memory NAME and --memory-config JSON (`what` says which agents they apply to).
void AddMemoryOptions(CLI::App* cmd, AgentEnvOptions* o, const std::string& what);

struct AgentEnv {
  std::unique_ptr<model::Model> model;
  std::optional<tokenizer::Tokenizer> tok;
  std::unique_ptr<ThreadPool> threads;
  std::optional<memory::store::AgentStore> store;
  std::optional<memory::embed::SentenceEncoder> encoder;
  std::string encoder_name;  // the encoder's directory name ("all-MiniLM-L6-v2"), if loaded
  std::unique_ptr<memory::AgentRuntime> runtime;
  std::string model_name;  // the GGUF file name without directory and extension
};

// with_runtime = false opens only the model, tokenizer and store (kvmem inspect).
Result<std::unique_ptr<AgentEnv>> OpenAgentEnv(const AgentEnvOptions& o, bool with_runtime = true);

}  // namespace kvmem::app
