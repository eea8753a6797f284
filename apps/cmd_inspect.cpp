// `kvmem inspect`: the agents the store holds for a model — memory policy, tokens, bytes on
// disk, KV format, last use — without loading any cache (manifests only).
#include <cstdio>
#include <ctime>
#include <string>

#include "CLI/CLI.hpp"
#include "agent_env.h"
#include "common.h"
#include "commands.h"
#include "memory/policy/policy_table.h"
#include "serve/engine_backend.h"

namespace kvmem::app {
namespace {

int Run(const AgentEnvOptions& o, bool json) {
  auto env = OpenAgentEnv(o, /*with_runtime=*/false);
  if (!env.ok()) return Fail(env.status());
  if (!(*env)->store) return Fail(InvalidArgument("inspect needs a store (drop --no-store)"));
  auto agents = (*env)->store->List();
  if (!agents.ok()) return Fail(agents.status());
  if (!json) {
    std::printf("store %s\n%-16s %-24s %-8s %8s %12s %-10s %s\n",
                (*env)->store->model_dir().c_str(), "tenant", "agent", "memory", "tokens", "bytes",
                "KV", "last use (UTC)");
  }
  for (const memory::store::AgentInfo& a : *agents) {
    if (!a.status.ok()) {
      std::printf("%s\n", json ? ("{\"error\":\"unreadable manifest\"}")
                               : ("(unreadable: " + a.status.ToString() + ")").c_str());
      continue;
    }
    char when[32] = "never";
    const std::time_t t = static_cast<std::time_t>(a.last_use_unix_ms / 1000);
    if (a.last_use_unix_ms > 0) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", std::gmtime(&t));
    const std::string fmt = serve::KvFormatLabel(a.formats);
    const auto kind = memory::FindPolicyKind(a.memory.policy);
    const std::string policy = kind.ok() ? (*kind)->name : a.memory.policy + "?";
    auto checkpoints = (*env)->store->ListCheckpoints(a.key, /*with_text=*/false);
    const size_t n_checkpoints = checkpoints.ok() ? checkpoints->size() : 0;
    if (json) {
      // Ids are any UTF-8 (quotes and backslashes included): the JSON library escapes them.
      const nlohmann::ordered_json line = {{"tenant", a.key.tenant},
                                           {"agent", a.key.id},
                                           {"policy", policy},
                                           {"config", a.memory.config},
                                           {"tokens", a.n_tokens},
                                           {"bytes", a.bytes_on_disk},
                                           {"kv_format", fmt},
                                           {"last_use_unix_ms", a.last_use_unix_ms},
                                           {"checkpoints", n_checkpoints}};
      std::printf("%s\n", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf("%-16s %-24s %-8s %8lld %12llu %-10s %s\n", a.key.tenant.c_str(),
                  a.key.id.c_str(), policy.c_str(), static_cast<long long>(a.n_tokens),
                  static_cast<unsigned long long>(a.bytes_on_disk), fmt.c_str(), when);
    }
  }
  return 0;
}

}  // namespace

void AddInspectCommand(CLI::App& app) {
  auto o = std::make_shared<AgentEnvOptions>();
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("inspect", "List the agents stored for a model");
  cmd->add_option("-m,--model", o->model, "GGUF model (default: the installed SmolLM2)");
  cmd->add_option("--store", o->store_dir, "agent store directory");
  cmd->add_flag("--json", *json, "one JSON object per line");
  cmd->callback([o, json] { throw CLI::RuntimeError(Run(*o, *json)); });
}

}  // namespace kvmem::app
