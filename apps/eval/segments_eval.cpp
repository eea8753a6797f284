#include "eval/segments_eval.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>

#include "engine/forward.h"
#include "eval/metrics.h"
#include "kv/kv_pool.h"
#include "memory/segments/keep_memory.h"

namespace kvmem::eval {
namespace {

using Json = nlohmann::json;
using memory::segments::BlendResult;
using memory::segments::KeepConfig;
using memory::segments::KeepMemory;
using memory::segments::RecomputeRule;
using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

Result<std::string> Str(const Json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string())
    return InvalidArgument(where + ": '" + key + "' missing or not a string");
  return j[key].get<std::string>();
}

Result<TextWorld> ParseWorld(const Json& j, const std::string& where) {
  TextWorld w;
  KVMEM_ASSIGN_OR_RETURN(w.id, Str(j, "id", where));
  KVMEM_ASSIGN_OR_RETURN(w.system, Str(j, "system", where));
  if (!j.contains("segments") || !j["segments"].is_array() || !j.contains("steps") ||
      !j["steps"].is_array()) {
    return InvalidArgument(where + ": 'segments' and 'steps' must be arrays");
  }
  for (const Json& s : j["segments"]) {
    KVMEM_ASSIGN_OR_RETURN(std::string name, Str(s, "name", where));
    KVMEM_ASSIGN_OR_RETURN(std::string text, Str(s, "text", where));
    w.segments.emplace_back(std::move(name), std::move(text));
  }
  for (const Json& s : j["steps"]) {
    TextWorld::Step step;
    KVMEM_ASSIGN_OR_RETURN(step.query, Str(s, "query", where));
    KVMEM_ASSIGN_OR_RETURN(step.answer, Str(s, "answer", where));
    if (!s.contains("updates") || !s["updates"].is_array())
      return InvalidArgument(where + ": a step's 'updates' must be an array");
    for (const Json& u : s["updates"]) {
      TextWorld::Update up;
      KVMEM_ASSIGN_OR_RETURN(up.name, Str(u, "name", where));
      up.remove = u.is_object() && u.value("delete", false);
      if (!up.remove) {
        KVMEM_ASSIGN_OR_RETURN(up.text, Str(u, "text", where));
      }
      step.updates.push_back(std::move(up));
    }
    if (s.contains("needs") && s["needs"].is_array()) {
      for (const Json& n : s["needs"]) {
        if (n.is_string()) step.needs.push_back(n.get<std::string>());
      }
    }
    w.steps.push_back(std::move(step));
  }
  return w;
}

// The memory as every method sees it after a step's updates: segments in memory order (new ones
// at the end), their tokens and embeddings.
struct WorldState {
  std::vector<std::string> names;
  std::map<std::string, std::vector<int32_t>> tokens;
  std::map<std::string, std::vector<float>> embedding;
};

// KEEP's groups (and its variants') come from sentence embeddings; keep-nosd has none.
bool UsesEmbeddings(const std::string& method) {
  return method.rfind("keep", 0) == 0 && method != "keep-nosd";
}

// What a method answered a query with.
struct Answered {
  std::unique_ptr<kv::KvSequence> owned;
  kv::KvSequence* seq = nullptr;
  int64_t next_pos = 0;
  std::vector<float> logits;
  double prefilled = 0;       // tokens computed, full-depth equivalent
  double computed_share = 1;  // of segment tokens, over layers
  double place_ms = 0;        // of the blend: copying stored rows, choosing what to recompute
  double importance_ms = 0;
  // Where the segments recomputed in the last layer sit: their mean placement index over the
  // number placed (0 first, 1 last); -1 when none or the rule is not per segment.
  double recomputed_at = -1;
};

class Method {
 public:
  virtual ~Method() = default;
  virtual Result<Answered> Step(const TextWorld::Step& step, const WorldState& state,
                                std::span<const int32_t> query,
                                std::span<const float> query_embedding) = 0;
  // Cache work between steps (off the next query's path); tokens prefilled.
  virtual Result<int64_t> AfterStep() { return int64_t{0}; }
};

std::vector<int32_t> Concat(const WorldState& state, std::span<const int32_t> prefix,
                            std::span<const int32_t> query) {
  std::vector<int32_t> all(prefix.begin(), prefix.end());
  for (const std::string& n : state.names) {
    const auto& t = state.tokens.at(n);
    all.insert(all.end(), t.begin(), t.end());
  }
  all.insert(all.end(), query.begin(), query.end());
  return all;
}

class FullMethod : public Method {
 public:
  FullMethod(const model::Model& m, ThreadPool* p, kv::KvPool* kv, std::vector<int32_t> prefix,
             bool reuse_prefix)
      : model_(m), pool_(p), kv_(kv), prefix_(std::move(prefix)), reuse_prefix_(reuse_prefix) {}

  Result<Answered> Step(const TextWorld::Step&, const WorldState& state,
                        std::span<const int32_t> query, std::span<const float>) override {
    const std::vector<int32_t> all = Concat(state, prefix_, query);
    if (!seq_ || !reuse_prefix_) {
      seq_ = std::make_unique<kv::KvSequence>(kv_);
      prev_.clear();
    }
    size_t common = 0;
    while (common < prev_.size() && common + 1 < all.size() && prev_[common] == all[common])
      ++common;
    seq_->Truncate(static_cast<int64_t>(common));
    Answered a;
    KVMEM_RETURN_IF_ERROR(engine::Forward(model_, pool_, seq_.get(), std::span(all).subspan(common),
                                          static_cast<int64_t>(common), false, &a.logits));
    prev_ = all;
    a.seq = seq_.get();
    a.next_pos = static_cast<int64_t>(all.size());
    a.prefilled = static_cast<double>(all.size() - common);
    return a;
  }

 private:
  const model::Model& model_;
  ThreadPool* pool_;
  kv::KvPool* kv_;
  std::vector<int32_t> prefix_;
  bool reuse_prefix_;
  std::unique_ptr<kv::KvSequence> seq_;
  std::vector<int32_t> prev_;
};

// KEEP and the methods that are KeepMemory with other settings. With chunk_tokens > 0
// (CacheBlend) the memory's units are chunks of consecutive segments, not segments.
class KeepMethod : public Method {
 public:
  KeepMethod(const model::Model& m, ThreadPool* p, kv::KvPool* kv, KeepConfig config,
             int chunk_tokens)
      : memory_(m, p, kv, config), chunk_tokens_(chunk_tokens) {}

  Status Begin(std::span<const int32_t> prefix) { return memory_.SetPrefix(prefix); }

  Result<Answered> Step(const TextWorld::Step& step, const WorldState& state,
                        std::span<const int32_t> query,
                        std::span<const float> query_embedding) override {
    if (chunk_tokens_ > 0) {
      KVMEM_RETURN_IF_ERROR(UpdateChunks(step, state));
    } else {
      KVMEM_RETURN_IF_ERROR(UpdateSegments(step, state));
    }
    memory_.TakeEncoded();
    Answered a;
    KVMEM_ASSIGN_OR_RETURN(BlendResult r, memory_.Answer(query, query_embedding));
    const double encoded = static_cast<double>(memory_.TakeEncoded().tokens);
    a.prefilled = encoded_ + encoded + r.stats.computed_share() * r.stats.segment_tokens +
                  static_cast<double>(r.stats.query_tokens);
    encoded_ = 0;
    a.computed_share = r.stats.computed_share();
    a.place_ms = r.stats.place_ms;
    a.importance_ms = r.stats.importance_ms;
    if (!r.last_layer_segments.empty() && memory_.last_read().size() > 1) {
      double sum = 0;
      for (int p : r.last_layer_segments) sum += p;
      a.recomputed_at = sum / static_cast<double>(r.last_layer_segments.size()) /
                        static_cast<double>(memory_.last_read().size() - 1);
    }
    a.owned = std::move(r.working);
    a.seq = a.owned.get();
    a.next_pos = r.next_pos;
    a.logits = std::move(r.logits);
    return a;
  }

  Result<int64_t> AfterStep() override {
    memory_.EndStep();
    memory_.TakeEncoded();
    KVMEM_RETURN_IF_ERROR(memory_.Refresh());
    return memory_.TakeEncoded().tokens;
  }

 private:
  Status UpdateSegments(const TextWorld::Step& step, const WorldState& state) {
    // The first step puts every segment; later ones only what changed.
    if (!started_) {
      for (const std::string& n : state.names) {
        KVMEM_RETURN_IF_ERROR(Put(n, state));
      }
      started_ = true;
      memory_.TakeEncoded();  // the initial build is not a step's cost
      return Status::Ok();
    }
    for (const TextWorld::Update& u : step.updates) {
      if (u.remove) {
        KVMEM_RETURN_IF_ERROR(memory_.Remove(u.name));
      } else {
        KVMEM_RETURN_IF_ERROR(Put(u.name, state));
      }
    }
    encoded_ = static_cast<double>(memory_.TakeEncoded().tokens);
    return Status::Ok();
  }

  Status Put(const std::string& n, const WorldState& state) {
    auto e = state.embedding.find(n);
    return memory_.Put(n, n, state.tokens.at(n),
                       e == state.embedding.end() ? std::vector<float>{} : e->second);
  }

  // CacheBlend's fixed chunks: segments packed in memory order until a chunk holds chunk_tokens;
  // a chunk whose member changed (or left) is prefilled again as a whole.
  Status UpdateChunks(const TextWorld::Step& step, const WorldState& state) {
    std::map<std::string, int> dirty_chunks;
    if (!started_) {
      for (const std::string& n : state.names) {
        if (chunks_.empty() || ChunkTokens(chunks_.back(), state) >= chunk_tokens_)
          chunks_.emplace_back();
        chunks_.back().push_back(n);
      }
      for (size_t c = 0; c < chunks_.size(); ++c) dirty_chunks[ChunkName(c)] = static_cast<int>(c);
    } else {
      for (const TextWorld::Update& u : step.updates) {
        int found = -1;
        for (size_t c = 0; c < chunks_.size() && found < 0; ++c) {
          auto it = std::find(chunks_[c].begin(), chunks_[c].end(), u.name);
          if (it == chunks_[c].end()) continue;
          found = static_cast<int>(c);
          if (u.remove) chunks_[c].erase(it);
        }
        if (found < 0 && !u.remove) {  // a new segment joins the last chunk, or opens one
          if (chunks_.empty() || ChunkTokens(chunks_.back(), state) >= chunk_tokens_)
            chunks_.emplace_back();
          chunks_.back().push_back(u.name);
          found = static_cast<int>(chunks_.size()) - 1;
        }
        if (found >= 0) dirty_chunks[ChunkName(found)] = found;
      }
    }
    for (const auto& [name, c] : dirty_chunks) {
      std::vector<int32_t> tokens;
      for (const std::string& n : chunks_[c]) {
        const auto& t = state.tokens.at(n);
        tokens.insert(tokens.end(), t.begin(), t.end());
      }
      if (tokens.empty()) {
        KVMEM_RETURN_IF_ERROR(memory_.Remove(name));
      } else {
        KVMEM_RETURN_IF_ERROR(memory_.Put(name, name, std::move(tokens), {}));
      }
    }
    encoded_ = started_ ? static_cast<double>(memory_.TakeEncoded().tokens) : 0;
    if (!started_) memory_.TakeEncoded();
    started_ = true;
    return Status::Ok();
  }

  static std::string ChunkName(size_t c) { return "chunk-" + std::to_string(c); }
  int64_t ChunkTokens(const std::vector<std::string>& chunk, const WorldState& state) const {
    int64_t n = 0;
    for (const std::string& s : chunk) n += static_cast<int64_t>(state.tokens.at(s).size());
    return n;
  }

  KeepMemory memory_;
  int chunk_tokens_;
  bool started_ = false;
  double encoded_ = 0;
  std::vector<std::vector<std::string>> chunks_;
};

// Mean NLL of `answer` after the prompt, then the greedy reply (answer_tokens at most, to the
// end of the turn), both decoded on a's sequence and rolled back.
struct Scored {
  double nll = 0;
  std::vector<int32_t> greedy;
};

Result<Scored> Score(const model::Model& model, const tokenizer::Tokenizer& tok, ThreadPool* pool,
                     Answered& a, std::span<const int32_t> answer, int answer_tokens) {
  Scored s;
  const int64_t rows = a.seq->n_rows();
  std::vector<float> logits = a.logits;
  for (size_t i = 0; i < answer.size(); ++i) {
    s.nll += NegLogLikelihood(logits, answer[i]);
    if (i + 1 == answer.size()) break;
    KVMEM_RETURN_IF_ERROR(engine::Forward(model, pool, a.seq, answer.subspan(i, 1),
                                          a.next_pos + static_cast<int64_t>(i), false, &logits));
  }
  s.nll /= static_cast<double>(std::max<size_t>(1, answer.size()));
  a.seq->Truncate(rows);
  logits = a.logits;
  for (int i = 0; i < answer_tokens; ++i) {
    const auto best =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (tok.IsEndOfGeneration(best)) break;
    s.greedy.push_back(best);
    const int32_t one[] = {best};
    KVMEM_RETURN_IF_ERROR(engine::Forward(model, pool, a.seq, one, a.next_pos + i, false, &logits));
  }
  a.seq->Truncate(rows);
  return s;
}

}  // namespace

Result<std::vector<TextWorld>> ReadTextWorlds(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open " + path);
  std::vector<TextWorld> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(n);
    Json j = Json::parse(line, nullptr, false);
    if (j.is_discarded()) return InvalidArgument(where + ": not JSON");
    KVMEM_ASSIGN_OR_RETURN(TextWorld w, ParseWorld(j, where));
    out.push_back(std::move(w));
  }
  return out;
}

Status RunSegmentsEval(const model::Model& model, const tokenizer::Tokenizer& tok,
                       const tokenizer::ChatTemplate& tmpl,
                       const memory::embed::SentenceEncoder* encoder, ThreadPool* pool,
                       const std::vector<TextWorld>& worlds, const SegmentsEvalOptions& options,
                       const std::function<void(const nlohmann::ordered_json&)>& row) {
  const bool needs_encoder =
      std::any_of(options.methods.begin(), options.methods.end(), UsesEmbeddings);
  if (needs_encoder && !encoder) {
    return FailedPrecondition(
        "keep groups segments by sentence embeddings: install the encoder with "
        "scripts/install_deps.sh --model minilm or pass --embed-model");
  }
  if (options.methods.empty() || options.methods[0] != "full")
    return InvalidArgument("the methods must start with full, the reference of KL and agreement");
  kv::KvPool kv(model.kv_geometry(256), 2048);
  constexpr std::string_view kMark = "\x01SEGMENTS\x01";
  for (const TextWorld& w : worlds) {
    // prefix | segments | suffix + query: the system turn holds the memory.
    const std::vector<tokenizer::ChatMessage> msgs = {
        {"system", w.system + "\n\n" + std::string(kMark)}, {"user", "\x02"}};
    KVMEM_ASSIGN_OR_RETURN(std::string text, tokenizer::RenderChat(tmpl, msgs, true));
    const size_t mark = text.find(kMark);
    const size_t user = text.find('\x02');
    if (mark == std::string::npos || user == std::string::npos)
      return Internal("chat template dropped the segment marker");
    const std::vector<int32_t> prefix = tok.Encode(text.substr(0, mark), true, true);
    const std::string before_query = text.substr(mark + kMark.size(), user - mark - kMark.size());
    const std::string after_query = text.substr(user + 1);

    std::vector<std::pair<std::string, std::unique_ptr<Method>>> methods;
    for (const std::string& name : options.methods) {
      if (name == "full" || name == "prefix") {
        methods.emplace_back(
            name, std::make_unique<FullMethod>(model, pool, &kv, prefix, name == "prefix"));
        continue;
      }
      KeepConfig c;
      c.recompute_ratio = options.ratio;
      c.top_k = options.top_k;
      c.static_after = options.static_after;
      c.group_size = options.group_size;
      int chunks = 0;
      if (name == "reuse") {
        c.static_dynamic = false;
        c.rule = RecomputeRule::kNone;
      } else if (name == "cacheblend") {
        c.static_dynamic = false;
        c.rule = RecomputeRule::kKvDeviation;
        chunks = options.chunk_tokens;
      } else if (name == "keep-nosd") {
        c.static_dynamic = false;
      } else if (name == "keep-1hop") {
        c.rule = RecomputeRule::kSingleHop;
      } else if (name == "keep-q") {
        c.query_source = true;
      } else if (name == "keep-d") {
        c.debias = true;
      } else if (name != "keep") {
        return InvalidArgument(
            "unknown method '" + name +
            "' (full, prefix, reuse, cacheblend, keep, keep-nosd, keep-1hop, keep-q, keep-d)");
      }
      auto m = std::make_unique<KeepMethod>(model, pool, &kv, c, chunks);
      KVMEM_RETURN_IF_ERROR(m->Begin(prefix));
      methods.emplace_back(name, std::move(m));
    }

    WorldState state;
    auto set = [&](const std::string& name, const std::string& t) {
      if (!state.tokens.count(name)) state.names.push_back(name);
      state.tokens[name] = tok.Encode(t + "\n", false, false);
      if (encoder) state.embedding[name] = encoder->Embed(std::vector<std::string>{t}, pool);
    };
    for (const auto& [name, t] : w.segments) set(name, t);
    const size_t n_steps = options.max_steps > 0
                               ? std::min<size_t>(w.steps.size(), options.max_steps)
                               : w.steps.size();
    for (size_t si = 0; si < n_steps; ++si) {
      const TextWorld::Step& step = w.steps[si];
      const auto t_embed = Clock::now();
      for (const TextWorld::Update& u : step.updates) {
        if (u.remove) {
          state.tokens.erase(u.name);
          state.embedding.erase(u.name);
          state.names.erase(std::remove(state.names.begin(), state.names.end(), u.name),
                            state.names.end());
        } else {
          set(u.name, u.text);
        }
      }
      std::vector<float> q_emb;
      if (encoder) q_emb = encoder->Embed(std::vector<std::string>{step.query}, pool);
      const double embed_ms = Ms(t_embed, Clock::now());
      const std::vector<int32_t> query =
          tok.Encode(before_query + step.query + after_query, false, true);
      const std::vector<int32_t> answer = tok.Encode(step.answer, false, false);
      int64_t memory_tokens = 0;
      for (const auto& [n, t] : state.tokens) memory_tokens += static_cast<int64_t>(t.size());

      std::vector<float> ref_logits;
      std::vector<int32_t> ref_greedy;
      for (auto& [name, method] : methods) {
        const auto t0 = Clock::now();
        // Step 0 of a segment method builds every cache: not a step of the world yet.
        KVMEM_ASSIGN_OR_RETURN(Answered a, method->Step(step, state, query, q_emb));
        double ttft = Ms(t0, Clock::now());
        if (UsesEmbeddings(name)) ttft += embed_ms;
        KVMEM_ASSIGN_OR_RETURN(Scored s, Score(model, tok, pool, a, answer, options.answer_tokens));
        a.owned.reset();
        const auto t_after = Clock::now();
        KVMEM_ASSIGN_OR_RETURN(int64_t after_tokens, method->AfterStep());
        const double after_ms = Ms(t_after, Clock::now());
        if (name == "full") {
          ref_logits = a.logits;
          ref_greedy = s.greedy;
        }
        nlohmann::ordered_json r;
        r["world"] = w.id;
        r["step"] = si;
        r["method"] = name;
        r["segments"] = state.names.size();
        r["memory_tokens"] = memory_tokens;
        r["ttft_ms"] = ttft;
        r["prefilled"] = a.prefilled;
        r["computed_share"] = a.computed_share;
        r["after_ms"] = after_ms;
        r["after_tokens"] = after_tokens;
        r["place_ms"] = a.place_ms;
        r["importance_ms"] = a.importance_ms;
        r["recomputed_at"] = a.recomputed_at;
        r["nll"] = s.nll;
        if (!ref_logits.empty()) {
          r["kl"] = KlDivergence(ref_logits, a.logits);
          r["agree"] = s.greedy == ref_greedy;
        }
        auto greedy = tok.Decode(s.greedy);
        r["greedy"] = greedy.ok() ? *greedy : "";
        r["answer"] = step.answer;
        row(r);
      }
    }
  }
  return Status::Ok();
}

}  // namespace kvmem::eval
