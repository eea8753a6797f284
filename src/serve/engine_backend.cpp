#include "serve/engine_backend.h"

#include <chrono>
#include <cmath>

#include "engine/grammar/grammar_constraint.h"
#include "memory/embed/sentence_encoder.h"
#include "serve/json_body.h"

namespace kvmem::serve {
namespace {

FinishReason ToFinishReason(memory::TurnEnd e) {
  switch (e) {
    case memory::TurnEnd::kEndOfTurn:
      return FinishReason::kEndOfTurn;
    case memory::TurnEnd::kStopSequence:
      return FinishReason::kStopSequence;
    case memory::TurnEnd::kLength:
      return FinishReason::kLength;
    case memory::TurnEnd::kCancelled:
      return FinishReason::kCancelled;
  }
  return FinishReason::kEndOfTurn;
}

AgentInfo ToAgentInfo(const memory::AgentStatus& s) {
  AgentInfo a;
  a.id = s.key.id;
  a.tenant = s.key.tenant;
  a.cached_tokens = s.tokens;
  a.bytes = s.bytes;
  a.tier = s.tier;
  a.kv_format = KvFormatLabel(s.formats);
  a.policy = s.policy;
  a.config = s.config;
  a.last_used_unix = s.last_use_unix_ms / 1000;
  a.last_turn = s.last_turn;
  a.server_conversation = s.server_conversation;
  a.max_checkpoints = s.max_checkpoints;
  for (const memory::store::CheckpointInfo& c : s.checkpoints) {
    a.checkpoints.push_back({c.id, c.n_tokens, static_cast<int64_t>(c.bytes_on_disk),
                             c.last_use_unix_ms / 1000});
  }
  return a;
}

engine::SamplerConfig ToSampler(const SamplingParams& p) {
  engine::SamplerConfig c;  // llama.cpp's defaults for what the client leaves unset
  if (p.temperature) c.temperature = *p.temperature;
  if (p.top_p) c.top_p = *p.top_p;
  if (p.top_k) c.top_k = *p.top_k;
  if (p.min_p) c.min_p = *p.min_p;
  if (p.repeat_penalty) c.repeat_penalty = *p.repeat_penalty;
  if (p.frequency_penalty) c.frequency_penalty = *p.frequency_penalty;
  if (p.presence_penalty) c.presence_penalty = *p.presence_penalty;
  c.seed = p.seed
               ? *p.seed
               : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return c;
}

// Token ids become their text here: the server never sees ids.
TokenLogprob ToTokenLogprob(const tokenizer::Tokenizer& tok, const engine::TokenLogprob& t) {
  TokenLogprob out;
  out.token = std::string(tok.TokenToPiece(t.id, /*render_special=*/true));
  if (!std::isnan(t.logprob)) out.logprob = t.logprob;
  out.top.reserve(t.top.size());
  for (const engine::TopToken& a : t.top) {
    out.top.push_back({std::string(tok.TokenToPiece(a.id, /*render_special=*/true)), a.logprob});
  }
  return out;
}

std::vector<TokenLogprob> ToTokenLogprobs(const tokenizer::Tokenizer& tok,
                                          std::span<const engine::TokenLogprob> all) {
  std::vector<TokenLogprob> out;
  out.reserve(all.size());
  for (const engine::TokenLogprob& t : all) out.push_back(ToTokenLogprob(tok, t));
  return out;
}

}  // namespace

std::string KvFormatLabel(const kv::KvFormats& f) {
  const std::string k = kv::KvFormatName(f.k), v = kv::KvFormatName(f.v);
  return k == v ? k : k + "/" + v;
}

EngineBackend::EngineBackend(memory::AgentRuntime* runtime, const tokenizer::Tokenizer& tok,
                             std::string model_name, std::string embedding_model)
    : runtime_(runtime), tok_(tok) {
  auto t = tokenizer::DetectChatTemplate(tok.chat_template(), tok.architecture());
  if (t.ok()) {
    template_ = *t;
    if (t->kind == tokenizer::ChatTemplateKind::kLlama31) model_.tool_format = ToolFormat::kLlama31;
    if (t->qwen_tools) model_.tool_format = ToolFormat::kQwen;
    if (t->kind == tokenizer::ChatTemplateKind::kHarmony) model_.tool_format = ToolFormat::kHarmony;
  } else {
    template_status_ = t.status();
  }
  model_.name = std::move(model_name);
  model_.context_length = static_cast<int>(runtime->n_ctx());
  if (const memory::embed::SentenceEncoder* enc = runtime->options().encoder; enc != nullptr) {
    model_.embedding_model = std::move(embedding_model);
    model_.embedding_dim = enc->dim();
  }
  model_.created_unix = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
}

Result<std::string> EngineBackend::RenderPrompt(const GenerationRequest& request) const {
  if (request.prompt) return *request.prompt;
  if (!template_) {
    return Unsupported("this model has no usable chat template (" + template_status_.ToString() +
                       "); use /v1/completions");
  }
  if (request.template_tools) {  // tools in the template's own format (serve/tool_calls.h)
    return tokenizer::RenderChatWithTools(*template_, request.messages, *request.template_tools,
                                          /*add_generation_prompt=*/true);
  }
  if (request.continue_final_message && !request.messages.empty() &&
      request.messages.back().role == "assistant") {
    // The reply continues the final assistant message: open the assistant's turn as usual and
    // append the text it starts with.
    const std::span<const ChatMessage> before(request.messages.data(), request.messages.size() - 1);
    KVMEM_ASSIGN_OR_RETURN(std::string text, tokenizer::RenderChat(*template_, before, true));
    return text + request.messages.back().content;
  }
  return tokenizer::RenderChat(*template_, request.messages, /*add_generation_prompt=*/true);
}

Result<std::string> EngineBackend::ContinuePrompt(const GenerationRequest& request,
                                                  std::string_view conversation) const {
  if (conversation.empty()) return RenderPrompt(request);
  if (request.prompt) return std::string(conversation) + *request.prompt;
  if (!template_) return RenderPrompt(request);  // its error
  const tokenizer::RenderChatFn render = [&](std::span<const ChatMessage> m, bool gen) {
    return request.template_tools
               ? tokenizer::RenderChatWithTools(*template_, m, *request.template_tools, gen)
               : tokenizer::RenderChat(*template_, m, gen);
  };
  std::span<const ChatMessage> messages = request.messages;
  std::string prefill;  // the final assistant message the reply continues
  if (request.continue_final_message && !messages.empty() && messages.back().role == "assistant") {
    prefill = messages.back().content;
    messages = messages.first(messages.size() - 1);
  }
  KVMEM_ASSIGN_OR_RETURN(std::string next, tokenizer::RenderContinuation(render, messages));
  return std::string(conversation) + next + prefill;
}

Result<GenerationResult> EngineBackend::Generate(const GenerationRequest& request,
                                                 GenerationSink* sink) {
  KVMEM_ASSIGN_OR_RETURN(std::string text, RenderPrompt(request));
  memory::TurnParams params;
  params.sampler = ToSampler(request.sampling);
  params.stop = request.stop;
  params.focus = request.retrieval_query.value_or("");
  params.max_tokens =
      request.max_tokens ? *request.max_tokens : static_cast<int>(runtime_->n_ctx());
  params.n = request.n;
  params.logprobs = request.logprobs;
  params.prompt_logprobs = request.prompt_logprobs;
  params.raw_reply = request.raw_reply;
  params.tenant = request.agent.tenant;  // an anonymous turn's prefix cache
  params.on_diverge = request.on_diverge;
  params.continue_conversation = [&](std::string_view conversation) {
    return ContinuePrompt(request, conversation);
  };
  std::optional<engine::grammar::GrammarConstraint> constraint;  // response_format, tools
  if (request.grammar != nullptr) {
    params.constraint = &constraint.emplace(request.grammar, &token_table());
  }
  memory::TurnCallbacks cb;
  cb.on_prompt = [&](const memory::PromptStats& p) {
    sink->OnPrompt({p.prompt_tokens, p.cached_tokens, p.tier, p.divergence,
                    ToTokenLogprobs(tok_, p.logprobs)});
  };
  cb.on_delta = [&](const memory::ReplyDelta& d) {
    const std::vector<TokenLogprob> logprobs = ToTokenLogprobs(tok_, d.logprobs);
    return sink->OnDelta({d.choice, d.text, logprobs});
  };
  const memory::store::AgentKey key{request.agent.tenant, request.agent.id};
  KVMEM_ASSIGN_OR_RETURN(
      memory::TurnResult r,
      runtime_->RunTurn(request.agent.id.empty() ? nullptr : &key, text, params, cb));
  GenerationResult g;
  g.finish_reason = ToFinishReason(r.end);
  g.stop_sequence = r.stop_sequence;
  for (const memory::ChoiceEnd& c : r.choices) {
    g.choices.push_back({ToFinishReason(c.end), c.stop_sequence});
  }
  g.usage = {r.prompt.prompt_tokens, r.prompt.cached_tokens, r.completion_tokens,
             r.prompt.divergence};
  g.tier = r.prompt.tier;
  return g;
}

const engine::grammar::TokenTable& EngineBackend::token_table() const {
  std::call_once(token_table_once_, [this] {
    token_table_ = std::make_unique<engine::grammar::TokenTable>(
        engine::grammar::TokenTable::FromTokenizer(tok_));
  });
  return *token_table_;
}

Result<AgentInfo> EngineBackend::CreateAgent(const std::string& tenant,
                                             const AgentCreateRequest& request) {
  const memory::MemorySpec& fallback = runtime_->default_memory();
  KVMEM_ASSIGN_OR_RETURN(
      memory::MemorySpec memory,
      request.policy.empty()
          ? runtime_->ValidateMemory(fallback.kind->name,
                                     request.config.empty() ? fallback.config : request.config)
          : runtime_->ValidateMemory(request.policy, request.config));
  memory.server_conversation = request.server_conversation;
  memory.max_checkpoints = request.max_checkpoints.value_or(memory::store::kDefaultMaxCheckpoints);
  KVMEM_RETURN_IF_ERROR(runtime_->CreateAgent({tenant, request.id}, memory));
  return GetAgent(tenant, request.id);
}

Result<std::vector<AgentInfo>> EngineBackend::ListAgents(const std::string& tenant) {
  KVMEM_ASSIGN_OR_RETURN(std::vector<memory::AgentStatus> all, runtime_->List(tenant));
  std::vector<AgentInfo> out;
  for (const memory::AgentStatus& s : all) out.push_back(ToAgentInfo(s));
  return out;
}

Result<AgentInfo> EngineBackend::GetAgent(const std::string& tenant, const std::string& id) {
  KVMEM_ASSIGN_OR_RETURN(memory::AgentStatus s, runtime_->Get({tenant, id}));
  return ToAgentInfo(s);
}

Status EngineBackend::DeleteAgent(const std::string& tenant, const std::string& id) {
  return runtime_->Delete({tenant, id});
}

Result<nlohmann::json> EngineBackend::RebuildAgent(const std::string& tenant,
                                                   const std::string& id) {
  return runtime_->Rebuild({tenant, id});
}

Result<nlohmann::json> EngineBackend::AgentSegments(const std::string& tenant,
                                                    const std::string& id,
                                                    const memory::SegmentRequest& request) {
  return runtime_->Segments({tenant, id}, request);
}

Result<memory::AgentMemoryView> EngineBackend::InspectAgent(const std::string& tenant,
                                                            const std::string& id) {
  return runtime_->Inspect({tenant, id});
}

Result<std::vector<memory::TurnRecord>> EngineBackend::AgentTurns(const std::string& tenant,
                                                                  const std::string& id) {
  return runtime_->RecentTurns({tenant, id});
}

Status EngineBackend::PutResponse(const std::string& tenant, const std::string& id,
                                  const nlohmann::json& record) {
  if (memory::store::AgentStore* store = runtime_->store()) {
    return store->SaveResponse({tenant, id}, record.dump());
  }
  std::lock_guard<std::mutex> lock(responses_mu_);
  responses_[tenant + "/" + id] = record;
  return Status::Ok();
}

Result<nlohmann::json> EngineBackend::GetResponse(const std::string& tenant,
                                                  const std::string& id) {
  if (memory::store::AgentStore* store = runtime_->store()) {
    KVMEM_ASSIGN_OR_RETURN(std::string text, store->LoadResponse({tenant, id}));
    nlohmann::json record = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object()) return Corrupt("stored response '" + tenant + "/" + id + "'");
    return record;
  }
  std::lock_guard<std::mutex> lock(responses_mu_);
  auto it = responses_.find(tenant + "/" + id);
  if (it == responses_.end()) return NotFound("no stored response '" + id + "'");
  return it->second;
}

Status EngineBackend::DeleteResponse(const std::string& tenant, const std::string& id) {
  if (memory::store::AgentStore* store = runtime_->store()) {
    return store->DeleteResponse({tenant, id});
  }
  std::lock_guard<std::mutex> lock(responses_mu_);
  if (responses_.erase(tenant + "/" + id) == 0) {
    return NotFound("no stored response '" + id + "'");
  }
  return Status::Ok();
}

std::vector<TokenPiece> EngineBackend::Tokenize(std::string_view text, bool add_special,
                                                bool parse_special) const {
  std::vector<TokenPiece> out;
  for (int32_t id : tok_.Encode(text, add_special, parse_special)) {
    out.push_back({id, std::string(tok_.TokenToPiece(id, /*render_special=*/true))});
  }
  return out;
}

Result<std::string> EngineBackend::Detokenize(std::span<const int32_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= tok_.vocab_size()) {
      return FieldError("tokens[" + std::to_string(i) + "]",
                        std::to_string(ids[i]) + " is outside the vocabulary of " +
                            std::to_string(tok_.vocab_size()) + " tokens");
    }
  }
  return tok_.Decode(ids, /*render_special=*/true);
}

// The same text and encoding RunTurn gives a request without an agent.
Result<int64_t> EngineBackend::CountPromptTokens(const GenerationRequest& request) const {
  KVMEM_ASSIGN_OR_RETURN(std::string text, RenderPrompt(request));
  return static_cast<int64_t>(
      tok_.Encode(text, /*add_special=*/true, /*parse_special=*/true).size());
}

Result<Embeddings> EngineBackend::Embed(std::span<const std::string> texts) const {
  const memory::embed::SentenceEncoder* enc = runtime_->options().encoder;
  if (enc == nullptr) return Internal("Embed without a sentence encoder");
  Embeddings out;
  // One thread: the runtime's pool belongs to the forward passes of the agents' turns.
  out.vectors = enc->Embed(texts, /*pool=*/nullptr);
  for (const std::string& t : texts) out.tokens += static_cast<int64_t>(enc->Tokenize(t).size());
  return out;
}

nlohmann::ordered_json EngineBackend::Policies() const { return runtime_->DescribePolicies(); }

BackendStats EngineBackend::stats() const {
  const memory::RuntimeStats s = runtime_->stats();
  BackendStats b;
  b.store_bytes = s.store_bytes;
  b.hot_bytes = s.hot_bytes;
  b.agents_hot = s.agents_hot;
  b.agents_stored = s.agents_stored;
  b.queued_requests = s.waiting_turns;
  b.steps = s.steps;
  b.prefix_cache_hit_tokens = s.prefix_cache.tree.hit_tokens;
  b.prefix_cache_lookup_tokens = s.prefix_cache.tree.lookup_tokens;
  b.prefix_cache_bytes = s.prefix_cache.bytes_held;
  b.prefix_cache_evictions = s.prefix_cache.tree.evictions;
  return b;
}

}  // namespace kvmem::serve
