// `kvmem scenario run FILE`: a multi-agent scenario (scenario/scenario.h) against a running
// server (--server URL) or an in-process one, with a Markdown transcript and a JSON report of
// prompt, cached and prefilled tokens and TTFT per phase and agent. `kvmem scenario check FILE`
// only validates.
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "agent_env.h"
#include "commands.h"
#include "common.h"
#include "scenario/http_client.h"
#include "scenario/runner.h"
#include "serve/engine_backend.h"
#include "serve/http_server.h"

namespace kvmem::app {
namespace {

struct ScenarioOptions {
  AgentEnvOptions env;
  std::string file;
  std::string server;  // empty: in-process
  std::string api_key;
  std::string json_path;
  std::string transcript_path;
  bool no_cache = false;
  bool batch = false;
  int max_tokens = 0;
};

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return IoError("cannot write '" + path + "'");
  return Status::Ok();
}

// The engine and a server on a free loopback port, for the scenario's requests.
struct InProcessServer {
  std::unique_ptr<AgentEnv> env;
  std::unique_ptr<serve::EngineBackend> backend;
  std::unique_ptr<serve::HttpServer> server;
};

Result<std::unique_ptr<InProcessServer>> StartInProcess(const AgentEnvOptions& o, int agents) {
  auto s = std::make_unique<InProcessServer>();
  KVMEM_ASSIGN_OR_RETURN(s->env, OpenAgentEnv(o));
  KVMEM_RETURN_IF_ERROR(s->env->runtime->Warmup());
  s->backend = std::make_unique<serve::EngineBackend>(s->env->runtime.get(), *s->env->tok,
                                                      s->env->model_name, s->env->encoder_name);
  serve::HttpServerOptions so;
  so.port = 0;
  so.max_running = agents;
  s->server = std::make_unique<serve::HttpServer>(s->backend.get(), so);
  KVMEM_RETURN_IF_ERROR(s->server->Start());
  return s;
}

void PrintSummary(const nlohmann::json& report) {
  std::fprintf(stderr, "%-28s %8s %8s %9s\n", "phase", "prompt", "cached", "prefilled");
  for (const auto& phase : report["phases"]) {
    int64_t prompt = 0;
    int64_t cached = 0;
    for (const auto& [id, a] : phase["agents"].items()) {
      prompt += a["prompt_tokens"].get<int64_t>();
      cached += a["cached_tokens"].get<int64_t>();
    }
    std::fprintf(stderr, "%-28s %8lld %8lld %9lld\n", phase["name"].get<std::string>().c_str(),
                 static_cast<long long>(prompt), static_cast<long long>(cached),
                 static_cast<long long>(prompt - cached));
  }
}

int Run(const ScenarioOptions& o) {
  auto scenario = scenario::LoadScenario(o.file);
  if (!scenario.ok()) return Fail(scenario.status());
  std::unique_ptr<InProcessServer> local;
  std::string url = o.server;
  if (url.empty()) {
    auto started = StartInProcess(o.env, static_cast<int>(scenario->agents.size()));
    if (!started.ok()) return Fail(started.status());
    local = std::move(*started);
    url = "http://127.0.0.1:" + std::to_string(local->server->port());
  }
  auto client = scenario::HttpScenarioClient::Create(url, o.api_key);
  if (!client.ok()) return Fail(client.status());
  scenario::RunOptions ro;
  ro.cache = !o.no_cache;
  ro.batch = o.batch;
  ro.max_tokens = o.max_tokens;
  ro.progress = [](const std::string& line) {
    std::fprintf(stderr, "scenario: %s\n", line.c_str());
  };
  auto result = scenario::RunScenario(*scenario, &*client, ro);
  if (local) local->server->Stop();
  if (!result.ok()) return Fail(result.status());
  const nlohmann::json report = result->Report(*scenario, ro);
  const std::string transcript = result->Transcript(*scenario, ro);
  if (o.transcript_path.empty()) {
    std::fputs(transcript.c_str(), stdout);
  } else if (Status st = WriteFile(o.transcript_path, transcript); !st.ok()) {
    return Fail(st);
  }
  if (!o.json_path.empty()) {
    if (Status st = WriteFile(o.json_path, report.dump(2) + "\n"); !st.ok()) return Fail(st);
  }
  PrintSummary(report);
  return 0;
}

int Check(const std::string& file) {
  auto scenario = scenario::LoadScenario(file);
  if (!scenario.ok()) return Fail(scenario.status());
  std::printf("%s: %zu agents, %zu phases\n", scenario->name.c_str(), scenario->agents.size(),
              scenario->phases.size());
  return 0;
}

}  // namespace

void AddScenarioCommands(CLI::App& app) {
  CLI::App* group = app.add_subcommand("scenario",
                                       "multi-agent scenarios (YAML), each agent "
                                       "with its private KV working memory");
  group->require_subcommand(1);

  auto o = std::make_shared<ScenarioOptions>();
  CLI::App* run = group->add_subcommand("run", "run a scenario; prints its transcript (Markdown)");
  run->add_option("file", o->file, "scenario YAML")->required();
  run->add_option("--server", o->server,
                  "a running kvmem server (http://HOST:PORT); default: the engine in-process");
  run->add_option("--api-key", o->api_key, "the server's API key (--server)");
  run->add_option(
      "--json", o->json_path,
      "write the report: prompt, cached, prefilled tokens and TTFT per phase and agent");
  run->add_option("--transcript", o->transcript_path, "write the transcript here, not to stdout");
  run->add_flag("--no-cache", o->no_cache,
                "caching off: agents keep nothing, every turn prefills its whole conversation");
  run->add_flag("--batch", o->batch,
                "each round's agents answer at once, in one batch (each sees the messages "
                "before the round)");
  run->add_option("--max-tokens", o->max_tokens, "tokens per reply (default: the scenario's)")
      ->check(CLI::Range(1, 4096));
  AddAgentEnvOptions(run, &o->env);
  run->callback([o] { throw CLI::RuntimeError(Run(*o)); });

  auto file = std::make_shared<std::string>();
  CLI::App* check = group->add_subcommand("check", "validate a scenario file");
  check->add_option("file", *file, "scenario YAML")->required();
  check->callback([file] { throw CLI::RuntimeError(Check(*file)); });
}

}  // namespace kvmem::app
