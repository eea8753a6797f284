// A deterministic serve::Backend for the HTTP tests. It "generates" by echoing: the reply to a
// chat is "Echo: " + the last message's content, one word (with its leading space) per token;
// a raw prompt is echoed the same way. A "token" of the prompt is one byte of the rendered
// conversation, and an agent's cache is the text of its last exchange, so cached_tokens is the
// length of the common prefix, as a real prefix match would give.
//
// Markers in the last message steer it:
//   [error:CODE]      fail before the prompt is accepted (CODE: not_found, resource, internal,
//                     out_of_range, invalid, unavailable, precondition)
//   [error-midway]    accept the prompt, emit one piece, then fail with Internal
//   [words:N]         reply with N words "w0 w1 …" instead of the echo
//   [slow]            sleep 2 ms before each piece
//   [block]           wait in Generate, before accepting the prompt, until Release()
//   [utf8-split]      reply "é" split across two pieces, then a lone 0xFF byte
//   [no-prompt-call]  never call OnPrompt
// Segments (AgentSegments) are kept per agent whose policy's table row has segments; a put
// whose text holds [error:CODE] fails with that code and changes nothing. A "token" of a
// segment is one byte of its text + "\n".
// Thread-safe.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/stop_strings.h"
#include "memory/policy/policy_table.h"
#include "serve/backend.h"
#include "serve/json_body.h"

namespace kvmem::serve::testing {

class FakeBackend : public Backend {
 public:
  Result<GenerationResult> Generate(const GenerationRequest& request,
                                    GenerationSink* sink) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_request_ = request;
      ++calls_;
      call_agents_.push_back(request.agent.id);
    }
    const int now_active = ++active_;
    for (int prev = max_active_.load(); now_active > prev;) {
      if (max_active_.compare_exchange_weak(prev, now_active)) break;
    }
    struct Leave {
      std::atomic<int>* active;
      ~Leave() { --*active; }
    } leave{&active_};

    const std::string last = request.prompt ? *request.prompt : request.messages.back().content;
    if (Has(last, "[block]")) WaitForRelease();
    if (Status s = MarkedError(last); !s.ok()) return s;

    const std::string rendered = Render(request);
    PromptInfo prompt{.prompt_tokens = static_cast<int64_t>(rendered.size())};
    const std::string key = request.agent.tenant + "/" + request.agent.id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = agents_.find(key);
      if (!request.agent.id.empty() && it != agents_.end()) {
        const std::string& memory = it->second.memory;
        const auto mismatch =
            std::mismatch(memory.begin(), memory.end(), rendered.begin(), rendered.end());
        prompt.cached_tokens = mismatch.first - memory.begin();
        prompt.tier = Tier::kHot;
      }
    }
    if (!Has(last, "[no-prompt-call]")) sink->OnPrompt(prompt);

    std::vector<std::string> pieces = Pieces(last);
    GenerationResult result;
    result.tier = prompt.tier;
    result.usage.prompt_tokens = prompt.prompt_tokens;
    result.usage.cached_tokens = prompt.cached_tokens;
    result.finish_reason = FinishReason::kEndOfTurn;
    engine::StopMatcher stops(request.stop);
    std::string reply;
    const bool slow = Has(last, "[slow]");
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (request.max_tokens && result.usage.completion_tokens == *request.max_tokens) {
        result.finish_reason = FinishReason::kLength;
        break;
      }
      if (slow) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      ++result.usage.completion_tokens;
      reply += pieces[i];
      const std::string out = stops.Push(pieces[i]);
      if (!out.empty() && !sink->OnText(out)) {
        result.finish_reason = FinishReason::kCancelled;
        ++cancelled_;
        break;
      }
      if (Has(last, "[error-midway]")) return Internal("fake failure after the start");
      if (stops.stopped()) {
        result.finish_reason = FinishReason::kStopSequence;
        result.stop_sequence = FirstStop(reply, request.stop);
        break;
      }
    }
    if (result.finish_reason != FinishReason::kStopSequence &&
        result.finish_reason != FinishReason::kCancelled) {
      const std::string tail = stops.Flush();
      if (!tail.empty()) sink->OnText(tail);
    }
    pieces_sent_ += result.usage.completion_tokens;
    if (!request.agent.id.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      Agent& a = agents_[key];
      const std::string policy = a.info.policy.empty() ? "full" : a.info.policy;
      const nlohmann::json config = a.info.config;
      a.info = AgentInfo{.id = request.agent.id,
                         .tenant = request.agent.tenant,
                         .cached_tokens = static_cast<int64_t>(rendered.size() + reply.size()),
                         .bytes = static_cast<int64_t>(rendered.size() + reply.size()) * 64,
                         .tier = Tier::kHot,
                         .kv_format = "f16",
                         .policy = policy,
                         .config = config,
                         .last_used_unix = 1700000000,
                         .last_turn = nlohmann::json{{"prefill_tokens", rendered.size()}}};
      a.turns.push_back({.turn = static_cast<int64_t>(a.turns.size()) + 1,
                         .at_unix_ms = 1700000000000,
                         .prompt_tokens = prompt.prompt_tokens,
                         .cached_tokens = prompt.cached_tokens,
                         .report = a.info.last_turn,
                         .detail = nullptr});
      a.memory = rendered + reply;
    }
    return result;
  }

  Result<AgentInfo> CreateAgent(const std::string& tenant,
                                const AgentCreateRequest& request) override {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string key = tenant + "/" + request.id;
    if (agents_.count(key) != 0) return FailedPrecondition("agent '" + request.id + "' exists");
    // The real table validates, as the engine's backend does (no model: heads go unchecked).
    const memory::PolicyEnv env;
    auto spec = request.policy.empty() ? memory::ParseMemorySpec(env, "full", request.config)
                                       : memory::ParseMemorySpec(env, request.policy, request.config);
    if (!spec.ok()) return spec.status();
    last_create_ = request;
    Agent& a = agents_[key];
    a.info = AgentInfo{.id = request.id,
                       .tenant = tenant,
                       .tier = Tier::kHot,
                       .kv_format = "f16",
                       .policy = spec->kind->name,
                       .config = spec->config,
                       .last_used_unix = 0,
                       .last_turn = nullptr};
    return a.info;
  }

  // The last request CreateAgent accepted, as the server parsed it.
  std::optional<AgentCreateRequest> last_create() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_create_;
  }

  Result<std::vector<AgentInfo>> ListAgents(const std::string& tenant) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<AgentInfo> out;
    for (const auto& [key, a] : agents_) {
      if (a.info.tenant == tenant) out.push_back(a.info);
    }
    return out;
  }

  Result<AgentInfo> GetAgent(const std::string& tenant, const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = agents_.find(tenant + "/" + id);
    if (it == agents_.end()) return NotFound("no agent '" + id + "'");
    return it->second.info;
  }

  Status DeleteAgent(const std::string& tenant, const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (agents_.erase(tenant + "/" + id) == 0) return NotFound("no agent '" + id + "'");
    return Status::Ok();
  }

  Result<nlohmann::json> RebuildAgent(const std::string& tenant, const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (agents_.count(tenant + "/" + id) == 0) return NotFound("no agent '" + id + "'");
    return nlohmann::json(nullptr);
  }

  Result<nlohmann::json> AgentSegments(const std::string& tenant, const std::string& id,
                                       const memory::SegmentRequest& request) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = agents_.find(tenant + "/" + id);
    if (it == agents_.end()) return NotFound("no agent '" + id + "'");
    Agent& a = it->second;
    auto kind = memory::FindPolicyKind(a.info.policy);
    if (!kind.ok() || !(*kind)->segments) {
      return Unsupported("agent '" + id + "' has the '" + a.info.policy +
                         "' memory policy; segments need the " + memory::SegmentPolicyNames() +
                         " policy");
    }
    KVMEM_RETURN_IF_ERROR(memory::ValidateSegmentRequest(request));
    const auto json = [](const std::string& name, const std::string& text) {
      return nlohmann::json{{"name", name},
                            {"text", text},
                            {"group", -1},
                            {"static", false},
                            {"tokens", text.size() + 1}};
    };
    auto seg = std::find_if(a.segments.begin(), a.segments.end(),
                            [&](const auto& s) { return s.first == request.name; });
    switch (request.op) {
      case memory::SegmentRequest::Op::kList: {
        nlohmann::json list = nlohmann::json::array();
        for (const auto& [name, text] : a.segments) list.push_back(json(name, text));
        return list;
      }
      case memory::SegmentRequest::Op::kPut:
        if (Status s = MarkedError(request.text); !s.ok()) return s;
        if (seg == a.segments.end()) {
          a.segments.emplace_back(request.name, request.text);
        } else {
          seg->second = request.text;
        }
        return json(request.name, request.text);
      case memory::SegmentRequest::Op::kDelete:
        if (seg == a.segments.end()) return NotFound("no segment named '" + request.name + "'");
        a.segments.erase(seg);
        return nlohmann::json{{"deleted", true}, {"name", request.name}};
    }
    return Internal("fake: unknown segment operation");
  }

  // The memory is the agent's rendered text, all cached, one part per turn; a turn record per
  // generation, its report naming the part it read.
  Result<memory::AgentMemoryView> InspectAgent(const std::string& tenant,
                                               const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = agents_.find(tenant + "/" + id);
    if (it == agents_.end()) return NotFound("no agent '" + id + "'");
    const Agent& a = it->second;
    nlohmann::json cached = nlohmann::json::array();
    if (!a.memory.empty()) cached = {0, a.memory.size()};
    return memory::AgentMemoryView{
        .policy = a.info.policy,
        .text = a.memory,
        .rows = static_cast<int64_t>(a.memory.size()),
        .memory = {{"cached", cached}, {"parts", nlohmann::json::array()}}};
  }

  Result<std::vector<memory::TurnRecord>> AgentTurns(const std::string& tenant,
                                                     const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = agents_.find(tenant + "/" + id);
    if (it == agents_.end()) return NotFound("no agent '" + id + "'");
    return it->second.turns;
  }

  Status PutResponse(const std::string& tenant, const std::string& id,
                     const nlohmann::json& record) override {
    std::lock_guard<std::mutex> lock(mu_);
    responses_[tenant + "/" + id] = record;
    return Status::Ok();
  }
  Result<nlohmann::json> GetResponse(const std::string& tenant, const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = responses_.find(tenant + "/" + id);
    if (it == responses_.end()) return NotFound("no stored response '" + id + "'");
    return it->second;
  }
  Status DeleteResponse(const std::string& tenant, const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (responses_.erase(tenant + "/" + id) == 0) return NotFound("no stored response");
    return Status::Ok();
  }
  size_t stored_responses() const {
    std::lock_guard<std::mutex> lock(mu_);
    return responses_.size();
  }

  nlohmann::ordered_json Policies() const override {
    return memory::DescribePolicies(memory::PolicyEnv{});
  }

  // A token is a byte (id = its value); an embedding is (bytes, 1) / |(bytes, 1)|.
  std::vector<TokenPiece> Tokenize(std::string_view text, bool add_special,
                                   bool) const override {
    std::vector<TokenPiece> out;
    if (add_special) out.push_back({256, ""});
    for (char c : text) out.push_back({static_cast<unsigned char>(c), std::string(1, c)});
    return out;
  }
  Result<std::string> Detokenize(std::span<const int32_t> ids) const override {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] > 256) return FieldError("tokens[" + std::to_string(i) + "]", "bad");
      if (ids[i] < 256) out.push_back(static_cast<char>(ids[i]));
    }
    return out;
  }
  Result<int64_t> CountPromptTokens(const GenerationRequest& request) const override {
    return static_cast<int64_t>(Render(request).size());
  }
  Result<Embeddings> Embed(std::span<const std::string> texts) const override {
    Embeddings e;
    for (const std::string& t : texts) {
      const float len = static_cast<float>(t.size());
      const float norm = std::sqrt(len * len + 1);
      e.vectors.push_back(len / norm);
      e.vectors.push_back(1 / norm);
      e.tokens += static_cast<int64_t>(t.size());
    }
    return e;
  }

  ModelInfo model() const override {
    return ModelInfo{.name = "fake-model",
                     .context_length = 4096,
                     .created_unix = 1700000000,
                     .embedding_model = "fake-encoder",
                     .embedding_dim = 2};
  }

  BackendStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return BackendStats{.store_bytes = 12345,
                        .hot_bytes = 678,
                        .agents_hot = static_cast<int64_t>(agents_.size()),
                        .agents_stored = static_cast<int64_t>(agents_.size()),
                        .queued_requests = 0,
                        .steps = {}};
  }

  // Test controls.
  GenerationRequest last_request() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_request_;
  }
  int calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  // The agent id of every Generate call, in call order.
  std::vector<std::string> call_agents() const {
    std::lock_guard<std::mutex> lock(mu_);
    return call_agents_;
  }
  int active() const { return active_.load(); }
  int max_active() const { return max_active_.load(); }
  int cancelled() const { return cancelled_.load(); }
  int64_t pieces_sent() const { return pieces_sent_.load(); }
  // Waits (up to 10 s) until `n` generations are blocked on [block].
  bool WaitBlocked(int n) {
    std::unique_lock<std::mutex> lock(gate_mu_);
    return gate_cv_.wait_for(lock, std::chrono::seconds(10), [&] { return blocked_ >= n; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(gate_mu_);
    released_ = true;
    gate_cv_.notify_all();
  }

 private:
  struct Agent {
    AgentInfo info;
    std::string memory;
    std::vector<std::pair<std::string, std::string>> segments;  // (name, text), memory order
    std::vector<memory::TurnRecord> turns;
  };

  static bool Has(const std::string& s, const char* marker) {
    return s.find(marker) != std::string::npos;
  }

  static Status MarkedError(const std::string& s) {
    if (Has(s, "[error:not_found]")) return NotFound("fake: no such thing");
    if (Has(s, "[error:resource]")) return Status(ErrorCode::kResourceExhausted, "fake: KV full");
    if (Has(s, "[error:unavailable]")) return Unavailable("fake: busy");
    if (Has(s, "[error:internal]")) return Internal("fake: /secret/path/blk.0 checksum");
    if (Has(s, "[error:out_of_range]")) return OutOfRange("fake: prompt too long");
    if (Has(s, "[error:invalid]")) return InvalidArgument("fake: bad request");
    if (Has(s, "[error:precondition]")) return FailedPrecondition("fake: busy agent");
    return Status::Ok();
  }

  static std::string Render(const GenerationRequest& r) {
    if (r.prompt) return *r.prompt;
    std::string out;
    for (const ChatMessage& m : r.messages) out += m.role + ": " + m.content + "\n";
    return out;
  }

  static std::vector<std::string> Pieces(const std::string& last) {
    if (Has(last, "[utf8-split]")) return {"\xC3", "\xA9", "\xFF"};
    std::vector<std::string> pieces;
    if (const size_t at = last.find("[words:"); at != std::string::npos) {
      const int n = std::stoi(last.substr(at + 7));
      for (int i = 0; i < n; ++i) pieces.push_back((i ? " w" : "w") + std::to_string(i));
      return pieces;
    }
    const std::string text = "Echo: " + last;
    size_t start = 0;
    for (size_t i = 1; i <= text.size(); ++i) {
      if (i == text.size() || text[i] == ' ') {
        pieces.push_back(text.substr(start, i - start));
        start = i;
      }
    }
    return pieces;
  }

  static std::string FirstStop(const std::string& text, const std::vector<std::string>& stops) {
    size_t best = std::string::npos;
    std::string which;
    for (const std::string& s : stops) {
      const size_t at = text.find(s);
      if (at < best) {
        best = at;
        which = s;
      }
    }
    return which;
  }

  void WaitForRelease() {
    std::unique_lock<std::mutex> lock(gate_mu_);
    ++blocked_;
    gate_cv_.notify_all();
    gate_cv_.wait(lock, [&] { return released_; });
  }

  mutable std::mutex mu_;
  GenerationRequest last_request_;
  int calls_ = 0;
  std::vector<std::string> call_agents_;
  std::map<std::string, Agent> agents_;
  std::map<std::string, nlohmann::json> responses_;  // "tenant/id" → record
  std::optional<AgentCreateRequest> last_create_;
  std::atomic<int> active_{0};
  std::atomic<int> max_active_{0};
  std::atomic<int> cancelled_{0};
  std::atomic<int64_t> pieces_sent_{0};

  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  int blocked_ = 0;
  bool released_ = false;
};

}  // namespace kvmem::serve::testing
