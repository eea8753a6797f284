// `kvmem chat --agent NAME`: a terminal conversation whose memory is the agent's KV cache in the
// store, so it persists across runs of the program (no server needed; the same agent is
// reachable through `kvmem serve` as tenant "default"). Each turn extends the conversation text
// the cache holds, so only the new user message and the template's markers are prefilled.
// --memory retrieval creates the agent with a MemArt memory (memory/agents/memory_mode.h): each
// turn then reads only the history blocks its attention retrieves, so the conversation can grow
// past the context; --show-recall prints what each turn recalled.
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
  std::string memory = "full";  // for a new agent: full or retrieval
  memory::MemArtConfig retrieval;
  std::string strategy = "softmax-sum";
  std::vector<std::string> retrieval_heads;  // "LAYER.HEAD" each
  bool show_recall = false;
};

// Creates the agent with the chosen memory when it does not exist yet; an existing agent keeps
// the mode it was created with (said on stderr when it differs).
Status PrepareAgent(memory::AgentRuntime& rt, const memory::store::AgentKey& key,
                    const ChatOptions& o) {
  KVMEM_ASSIGN_OR_RETURN(memory::MemoryMode mode, memory::ParseMemoryMode(o.memory));
  auto existing = rt.Get(key);
  if (existing.ok()) {
    if (existing->mode != mode) {
      std::fprintf(stderr, "kvmem chat: agent '%s' exists with %s memory; --memory %s ignored\n",
                   key.id.c_str(), memory::MemoryModeName(existing->mode), o.memory.c_str());
    }
    return Status::Ok();
  }
  if (existing.status().code() != ErrorCode::kNotFound) return existing.status();
  if (mode == memory::MemoryMode::kFull) return Status::Ok();  // created by its first turn
  memory::AgentMemory m;
  m.mode = mode;
  m.retrieval = o.retrieval;
  KVMEM_ASSIGN_OR_RETURN(m.retrieval.strategy, memory::ParseStrategy(o.strategy));
  for (const std::string& name : o.retrieval_heads) {
    auto h = memory::ParseHeadRef(name);
    if (!h.ok()) return h.status().WithContext("--retrieval-heads");
    m.retrieval.retrieval_heads.push_back(*h);
  }
  return rt.CreateAgent(key, m);
}

// What a retrieval turn read, on stderr: counts, and with --show-recall the blocks most layers
// retrieved.
void PrintRecall(const memory::RetrievalTurn& t, bool show_recall) {
  std::fprintf(stderr,
               "[retrieval: %lld history rows read of %lld (%zu blocks), %lld new tokens "
               "prefilled, KV at decode %lld]\n",
               static_cast<long long>(t.retrieved_rows), static_cast<long long>(t.history_tokens),
               t.blocks.size(), static_cast<long long>(t.prefill_tokens),
               static_cast<long long>(t.kv_len_decode));
  if (!show_recall) return;
  std::vector<memory::RecalledBlock> top = t.blocks;
  std::stable_sort(top.begin(), top.end(), [](const auto& a, const auto& b) {
    return a.layers > b.layers;
  });
  top.resize(std::min<size_t>(top.size(), 8));
  for (const memory::RecalledBlock& b : top) {
    std::string text = b.text;
    std::replace(text.begin(), text.end(), '\n', ' ');
    std::fprintf(stderr, "  block %lld (tokens %lld-%lld, %d layers): %s\n",
                 static_cast<long long>(b.block), static_cast<long long>(b.first_token),
                 static_cast<long long>(b.first_token + b.n_tokens - 1), b.layers, text.c_str());
  }
}

// What the template appends after an assistant reply to add a user turn and open the next reply,
// found by rendering a conversation with and without that turn (the supported templates render
// every turn independently of the later ones).
Result<std::string> NextTurnSuffix(const tokenizer::ChatTemplate& t, const std::string& user) {
  const std::vector<tokenizer::ChatMessage> one = {{"user", "x"}};
  const std::vector<tokenizer::ChatMessage> three = {
      {"user", "x"}, {"assistant", "y"}, {"user", user}};
  KVMEM_ASSIGN_OR_RETURN(std::string a, tokenizer::RenderChat(t, one, true));
  KVMEM_ASSIGN_OR_RETURN(std::string b, tokenizer::RenderChat(t, three, true));
  if (!b.starts_with(a + "y")) {
    return Unsupported("this chat template does not render turns independently");
  }
  return b.substr(a.size() + 1);
}

int Run(const ChatOptions& o) {
  auto env_or = OpenAgentEnv(o.env);
  if (!env_or.ok()) return Fail(env_or.status());
  AgentEnv& env = **env_or;
  auto tmpl = tokenizer::DetectChatTemplate(env.tok->chat_template(), env.tok->architecture());
  if (!tmpl.ok()) return Fail(tmpl.status().WithContext("chat template"));
  const memory::store::AgentKey key{o.tenant, o.agent};
  Status valid = memory::store::ValidateAgentKey(key);
  if (!valid.ok()) return Fail(valid);
  if (Status st = PrepareAgent(*env.runtime, key, o); !st.ok()) return Fail(st);
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
      auto suffix = NextTurnSuffix(*tmpl, line);
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
    if (t.retrieval) PrintRecall(*t.retrieval, o.show_recall);
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
  cmd->add_option("--memory", o->memory,
                  "memory of a new agent: full (its KV cache) or retrieval (MemArt blocks)")
      ->check(CLI::IsMember({"full", "retrieval"}))
      ->capture_default_str();
  cmd->add_option("--block-size", o->retrieval.block_size, "retrieval: tokens per block (8/16/32)")
      ->capture_default_str();
  cmd->add_option("--top-k", o->retrieval.top_k, "retrieval: blocks read per layer")
      ->capture_default_str();
  cmd->add_option("--strategy", o->strategy,
                  "retrieval: softmax-sum, softmax-max, rr-sum, rr-max (-centre and -exact "
                  "variants too)")
      ->capture_default_str();
  cmd->add_option("--keep-first", o->retrieval.keep_first,
                  "retrieval: first history tokens always read (a system prompt)");
  cmd->add_option("--keep-last", o->retrieval.keep_last,
                  "retrieval: most recent history tokens always read");
  cmd->add_option("--neighbors", o->retrieval.neighbors,
                  "retrieval: adjacent blocks each found block brings, within --top-k")
      ->capture_default_str();
  cmd->add_flag("--turn-bounded", o->retrieval.turn_bounded,
                "retrieval: neighbours stay within the turns (chat messages) of the found block");
  cmd->add_flag("--whole-turns", o->retrieval.whole_turns,
                "retrieval: read the whole turns (chat messages) of the best blocks, as many as "
                "fit in --top-k blocks' rows (needs --retrieval-heads, --neighbors 0)");
  cmd->add_option("--retrieval-heads", o->retrieval_heads,
                  "retrieval: LAYER.HEAD query heads that choose the blocks for every layer (find "
                  "them with kvmem eval locomo --head-report)")
      ->delimiter(',');
  cmd->add_flag("--show-recall", o->show_recall, "retrieval: print the blocks each turn read");
  cmd->callback([o] { throw CLI::RuntimeError(Run(*o)); });
}

}  // namespace kvmem::app
