#include "agent_env.h"

#include <algorithm>
#include <filesystem>

#include "common.h"
#include "kv/kv_format.h"
#include "memory/store/fingerprint.h"
#include "memory/store/redis_backend.h"

namespace kvmem::app {
namespace {

Result<kv::KvFormats> ParseFormats(const std::string& s) {
  const size_t colon = s.find(':');
  KVMEM_ASSIGN_OR_RETURN(kv::KvFormat k, kv::ParseKvFormat(s.substr(0, colon)));
  kv::KvFormat v = k;
  if (colon != std::string::npos) {
    KVMEM_ASSIGN_OR_RETURN(v, kv::ParseKvFormat(s.substr(colon + 1)));
  }
  return kv::KvFormats{k, v};
}

std::string Stem(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  if (name.size() > 5 && name.ends_with(".gguf")) name.resize(name.size() - 5);
  return name;
}

}  // namespace

void AddAgentEnvOptions(CLI::App* cmd, AgentEnvOptions* o) {
  cmd->add_option("-m,--model", o->model, "GGUF model (default: the installed SmolLM2)");
  cmd->add_option("--store", o->store_dir,
                  "agent store: a directory (default: $XDG_DATA_HOME/kvmem, else "
                  "~/.local/share/kvmem), or redis://HOST:PORT/DB to share agents between "
                  "servers");
  cmd->add_option("--store-cache", o->store_cache,
                  "a Redis store's blocks are also kept in this local directory, so a restarted "
                  "server reads them from Redis no more (default: $XDG_CACHE_HOME/kvmem/"
                  "store-cache, else ~/.cache/kvmem/store-cache; none: RAM only)");
  cmd->add_option("--store-cache-mib", o->store_cache_mib,
                  "bound of the --store-cache directory (MiB); least recently used blocks "
                  "beyond it are removed")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--no-store", o->no_store, "keep agents' caches in RAM only (nothing persists)");
  cmd->add_option(
         "--kv-format", o->kv_format,
         "KV storage format of agents' caches, FORMAT or K:V; one of " + kv::KvFormatNames())
      ->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "threads (default: all cores)");
  cmd->add_option("-c,--ctx", o->n_ctx, "context per agent in tokens (default: the model's)");
  cmd->add_option("--hot-mib", o->hot_budget_mib,
                  "RAM for resident agent caches (MiB); least recently used agents beyond it "
                  "are evicted to the store")
      ->capture_default_str();
  cmd->add_option("--max-history", o->max_history_tokens,
                  "memory policies whose history outgrows the context: tokens kept at most")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--prefault-mib", o->prefault_mib,
                  "KV memory (MiB) written at start-up, so the first agents loaded or computed "
                  "land in touched pages (kvmem serve)")
      ->capture_default_str();
  cmd->add_option("--embed-model", o->embed_model,
                  "sentence encoder directory for the epicache policy's episodes and "
                  "/v1/embeddings (default: the installed all-MiniLM-L6-v2, "
                  "scripts/install_deps.sh --model minilm)");
}

void AddMemoryOptions(CLI::App* cmd, AgentEnvOptions* o, const std::string& what) {
  std::string names;
  for (const memory::PolicyKind& k : memory::PolicyKinds()) {
    names += (names.empty() ? "" : ", ") + k.name;
  }
  cmd->add_option("--memory", o->memory, "memory policy of " + what + ": " + names)
      ->capture_default_str();
  cmd->add_option("--memory-config", o->memory_config,
                  "the policy's config, a JSON object (GET /v1/policies lists the fields)")
      ->capture_default_str();
}

Result<std::unique_ptr<AgentEnv>> OpenAgentEnv(const AgentEnvOptions& o, bool with_runtime) {
  auto env = std::make_unique<AgentEnv>();
  KVMEM_ASSIGN_OR_RETURN(kv::KvFormats formats, ParseFormats(o.kv_format));
  KVMEM_ASSIGN_OR_RETURN(ModelAndTokenizer mt, LoadModelAndTokenizer(o.model));
  env->model = std::move(mt.model);
  env->tok = std::move(mt.tok);
  const model::ModelSpec& spec = env->model->spec();
  KVMEM_RETURN_IF_ERROR(kv::CheckKvFormats(formats, spec.head_dim_k, spec.head_dim_v));
  const std::string path = o.model.empty() ? DefaultModelPath() : o.model;
  env->model_name = Stem(path);
  KVMEM_ASSIGN_OR_RETURN(const std::string fingerprint, memory::store::ModelFingerprint(path));
  std::string presets_dir;
  if (!o.no_store) {
    memory::store::StoreOptions so;
    if (o.store_dir.empty()) {
      KVMEM_ASSIGN_OR_RETURN(so.root, memory::store::DefaultStoreRoot());
    } else {
      so.root = o.store_dir;
    }
    if (memory::store::IsRedisUrl(so.root)) {  // presets stay on this machine
      KVMEM_ASSIGN_OR_RETURN(presets_dir, memory::store::DefaultStoreRoot());
      presets_dir += "/presets";
      if (o.store_cache.empty()) {
        KVMEM_ASSIGN_OR_RETURN(so.cache_dir, memory::store::DefaultStoreCacheDir());
      } else if (o.store_cache != "none") {
        so.cache_dir = o.store_cache;
      }
      so.cache_dir_bytes = static_cast<uint64_t>(o.store_cache_mib) << 20;
    } else {
      presets_dir = so.root + "/presets";
    }
    so.model_fingerprint = fingerprint;
    so.n_vocab = spec.n_vocab;
    auto store = memory::store::AgentStore::Open(so);
    if (!store.ok()) return store.status().WithContext("agent store " + so.root);
    env->store.emplace(std::move(store).value());
  }
  if (!with_runtime) return env;
  env->threads = std::make_unique<ThreadPool>(o.threads > 0 ? o.threads : DefaultThreads());
  memory::AgentRuntimeOptions ro;
  ro.formats = formats;
  ro.n_ctx = o.n_ctx;
  ro.hot_budget_bytes = static_cast<size_t>(std::max<int64_t>(o.hot_budget_mib, 1)) << 20;
  ro.prefault_bytes = static_cast<size_t>(std::max<int64_t>(o.prefault_mib, 0)) << 20;
  ro.max_history_tokens = o.max_history_tokens;
  ro.prefix_cache_bytes = static_cast<size_t>(std::max<int64_t>(o.prefix_cache_bytes, 0));
  ro.model_fingerprint = fingerprint;
  ro.presets_dir = presets_dir;
  const std::string embed_path = o.embed_model.empty() ? DefaultEmbedModel() : o.embed_model;
  if (!o.embed_model.empty() || std::filesystem::exists(embed_path)) {
    auto enc = memory::embed::SentenceEncoder::Load(embed_path);
    if (!enc.ok()) return enc.status().WithContext("--embed-model");
    env->encoder.emplace(std::move(*enc));
    std::filesystem::path dir = std::filesystem::path(embed_path).lexically_normal();
    if (dir.filename().empty()) dir = dir.parent_path();  // "dir/"
    if (dir.extension() == ".safetensors") dir = dir.parent_path();  // the weights file
    env->encoder_name = dir.filename().string();
    ro.encoder = &*env->encoder;
  }
  env->runtime = std::make_unique<memory::AgentRuntime>(*env->model, *env->tok, env->threads.get(),
                                                        env->store ? &*env->store : nullptr, ro);
  const memory::Json config = memory::Json::parse(o.memory_config, nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    return InvalidArgument("--memory-config must be a JSON object");
  }
  KVMEM_RETURN_IF_ERROR(env->runtime->SetDefaultMemory(o.memory, config).WithContext("--memory"));
  return env;
}

}  // namespace kvmem::app
