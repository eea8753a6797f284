// `kvmem chat --agent NAME`: a terminal conversation whose memory is the agent's KV cache in the
// store, so it persists across runs of the program (no server needed; the same agent is
// reachable through `kvmem serve` as tenant "default"). Each turn extends the conversation text
// the cache holds, so only the new user message and the template's markers are prefilled.
// --memory NAME --memory-config JSON chooses the memory policy of a new agent
// (memory/policy/policy_table.h; GET /v1/policies lists them), e.g. one whose turns read only
// the history blocks their attention retrieves, so the conversation can grow past the context;
// each turn prints the policy's account, and --show-recall the memory it recalled.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "agent_env.h"
#include "common.h"
#include "commands.h"
#include "serve/http_server.h"
#include "tokenizer/chat_template.h"

namespace kvmem::app {
namespace {

struct ChatOptions {
  AgentEnvOptions env;
  std::string agent = "default";
  std::string tenant = serve::kDefaultTenant;
  std::string system;
  int n_predict = 256;
  float temperature = 0.7f;
  int64_t seed = -1;
  bool show_recall = false;
};

// An existing agent keeps the policy it was created with (said on stderr when it differs from
// --memory); a new one gets --memory (the runtime's default) with its first turn.
Status CheckAgentMemory(memory::AgentRuntime& rt, const memory::store::AgentKey& key) {
  auto existing = rt.Get(key);
  if (existing.ok()) {
    const memory::MemorySpec& wanted = rt.default_memory();
    if (existing->policy != wanted.kind->name) {
      std::fprintf(stderr, "kvmem chat: agent '%s' exists with %s memory; --memory %s ignored\n",
                   key.id.c_str(), existing->policy.c_str(), wanted.kind->name.c_str());
    }
    return Status::Ok();
  }
  return existing.status().code() == ErrorCode::kNotFound ? Status::Ok() : existing.status();
}

// The policy's account of a turn on stderr: its scalar fields, and with --show-recall the text
// of what it recalled (report entries with a "text"), those read in the most layers first.
void PrintReport(const memory::Json& report, bool show_recall) {
  if (!report.is_object()) return;
  std::string line;
  for (const auto& [key, value] : report.items()) {
    if (value.is_number() || value.is_string() || value.is_boolean()) {
      line += (line.empty() ? "" : ", ") + key + " " +
              (value.is_string() ? value.get<std::string>() : value.dump());
    }
  }
  std::fprintf(stderr, "[memory: %s]\n", line.c_str());
  if (!show_recall) return;
  for (const auto& [key, value] : report.items()) {
    if (!value.is_array()) continue;
    std::vector<memory::Json> items;
    for (const memory::Json& item : value) {
      if (item.is_object() && item.contains("text") && item["text"].is_string()) {
        items.push_back(item);
      }
    }
    std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
      return a.value("layers", 0) > b.value("layers", 0);
    });
    items.resize(std::min<size_t>(items.size(), 8));
    for (const memory::Json& item : items) {
      std::string text = item["text"].get<std::string>();
      std::replace(text.begin(), text.end(), '\n', ' ');
      memory::Json where = item;
      where.erase("text");
      std::fprintf(stderr, "  %s %s: %s\n", key.c_str(), where.dump().c_str(), text.c_str());
    }
  }
}

// What the template appends after an assistant reply to add a user turn and open the next reply,
// found by rendering a conversation with and without that turn (the supported templates render
// every turn independently of the later ones).
int Run(const ChatOptions& o) {
  auto env_or = OpenAgentEnv(o.env);
  if (!env_or.ok()) return Fail(env_or.status());
  AgentEnv& env = **env_or;
  auto tmpl = tokenizer::DetectChatTemplate(env.tok->chat_template(), env.tok->architecture());
  if (!tmpl.ok()) return Fail(tmpl.status().WithContext("chat template"));
  const memory::store::AgentKey key{o.tenant, o.agent};
  Status valid = memory::store::ValidateAgentKey(key);
  if (!valid.ok()) return Fail(valid);
  if (Status st = CheckAgentMemory(*env.runtime, key); !st.ok()) return Fail(st);
  std::fprintf(stderr,
               "kvmem chat: agent '%s' (%s) | /forget erases its memory, /exit or Ctrl-D ends\n",
               o.agent.c_str(), env.store ? env.store->AgentDir(key).c_str() : "not persisted");
  memory::TurnParams params;
  params.max_tokens = o.n_predict;
  params.sampler.temperature = o.temperature;
  uint64_t seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : 0x9E3779B97F4A7C15ull;
  std::string line;
  while (true) {
    std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line.empty()) continue;
    if (line == "/forget") {
      Status st = env.runtime->Delete(key);
      std::fprintf(stderr, "%s\n", st.ok() ? "(forgotten)" : st.ToString().c_str());
      continue;
    }
    auto before = env.runtime->ConversationText(key);
    if (!before.ok()) return Fail(before.status());
    std::string prompt;
    if (before->empty()) {
      std::vector<tokenizer::ChatMessage> msgs;
      if (!o.system.empty()) msgs.push_back({"system", o.system});
      msgs.push_back({"user", line});
      auto r = tokenizer::RenderChat(*tmpl, msgs, true);
      if (!r.ok()) return Fail(r.status());
      prompt = *r;
    } else {
      const tokenizer::ChatMessage user{"user", line};
      auto suffix = tokenizer::RenderContinuation(
          [&](std::span<const tokenizer::ChatMessage> m, bool gen) {
            return tokenizer::RenderChat(*tmpl, m, gen);
          },
          {&user, 1});
      if (!suffix.ok()) return Fail(suffix.status());
      prompt = *before + *suffix;
    }
    params.sampler.seed = seed++;
    memory::TurnCallbacks cb;
    cb.on_text = [](std::string_view s) {
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
      return true;
    };
    auto turn = env.runtime->RunTurn(&key, prompt, params, cb);
    if (!turn.ok()) return Fail(turn.status());
    std::printf("\n");
    const memory::TurnResult& t = *turn;
    std::fprintf(stderr,
                 "[%s: %lld of %lld prompt tokens cached, prefill %.0f ms | %lld tokens at %.1f "
                 "tok/s | saved in %.0f ms]\n",
                 memory::TierName(t.prompt.tier), static_cast<long long>(t.prompt.cached_tokens),
                 static_cast<long long>(t.prompt.prompt_tokens), 1e3 * t.prompt.prefill_seconds,
                 static_cast<long long>(t.completion_tokens),
                 t.completion_tokens / std::max(t.decode_seconds, 1e-9), 1e3 * t.save_seconds);
    PrintReport(t.memory_report, o.show_recall);
  }
  return 0;
}

}  // namespace

void AddChatCommand(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* cmd =
      app.add_subcommand("chat", "Terminal chat with an agent whose memory persists across runs");
  AddAgentEnvOptions(cmd, &o->env);
  cmd->add_option("--agent", o->agent, "agent id")->capture_default_str();
  cmd->add_option("--tenant", o->tenant, "tenant (the server's default tenant by default)")
      ->capture_default_str();
  cmd->add_option("--system", o->system, "system prompt of a new agent");
  cmd->add_option("-n,--n-predict", o->n_predict, "tokens per reply at most")
      ->capture_default_str();
  cmd->add_option("--temp", o->temperature, "temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "sampling seed");
  AddMemoryOptions(cmd, &o->env, "a new agent");
  cmd->add_flag("--show-recall", o->show_recall, "print the memory each turn recalled");
  cmd->callback([o] { throw CLI::RuntimeError(Run(*o)); });
}

}  // namespace kvmem::app
