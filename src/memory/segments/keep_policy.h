// The `keep` memory policy (KEEP, papers/keep.txt; the memory itself is keep_memory.h): an
// agent's memory is named text segments that a client writes between turns
// (MemoryPolicy::Segments: PUT/DELETE/GET /v1/agents/{id}/segments, `kvmem segments`), each
// with a KV cache computed once after the same prefix, and every request is answered over them:
// the chosen segments' caches placed one after another at fresh positions, the attention between
// them repaired by selective recomputation (blend.h), then the request prefilled.
//
// A turn's context, in position order:
//   prefix    the chat template's system turn opened, up to where its content would start, and
//             "Memory:\n": "<|im_start|>system\nMemory:\n" (ChatML). Gemma has no system turn:
//             a user turn holds the memory instead.
//   segments  each segment's text + "\n", in memory order (all of them, or with top_k > 0 the
//             top_k nearest the request by sentence embedding, static groups whole)
//   query     the rest of that turn ("<|im_end|>\n"), then the request's whole rendered prompt
// The reply is not remembered: the segments are the memory. Commit ends the step that KEEP's
// static/dynamic grouping counts (a group is static once none of its segments changed for
// static_after steps) and refreshes the caches for the next step (promotions to static run
// after the reply, off the next request's first token). text() is "" and client_conversation()
// nullopt: every prompt is read as a new request, none diverges.
//
// Embeddings (PolicyEnv::encoder): segments and queries are embedded when top_k > 0 (retrieval)
// or group_size > 1 (k-means groups); group_size 1 is KEEP's ablation without static-dynamic
// construction (every segment a cache of its own) and, with top_k 0, needs no encoder.
//
// Persisted: KeepMemory's rows (the prefix, then every cache), their tokens, and its state under
// {"version": 1, "keep": ...}; the stored text is the memory as text (prefix and segments).
// KeepMemory::Persist copies every cache into one new sequence: Persist() keeps that copy until
// the next non-const call, so between a save and the next call the rows are held twice.
// Thread-safety: as MemoryPolicy.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "memory/policy/memory_policy.h"
#include "memory/policy/policy_table.h"
#include "memory/segments/keep_memory.h"

namespace kvmem::memory {

PolicyKind KeepPolicyKind();

// Segments an agent's memory holds at most.
inline constexpr size_t kMaxKeepSegments = 256;

class KeepPolicy : public MemoryPolicy {
 public:
  static Result<std::unique_ptr<KeepPolicy>> Make(const PolicyEnv& env, const Json& config,
                                                  kv::KvPool* pool, StoredMemory stored);

  Result<TurnPlan> Plan(const TurnInput& input) const override;
  Result<PromptAccount> Apply(const TurnPlan& plan, std::vector<float>* logits) override;
  bool CanStep() const override;
  Status Step(int32_t token, std::vector<float>* logits) override;
  Status Commit() override;
  void Abort() override;
  Result<Json> Segments(const SegmentRequest& request) override;
  // rows null when KeepMemory could not copy its rows (the error is logged; the save fails).
  PersistedMemory Persist() const override;
  // After a turn: {"segments", "segments_read": [names], "segment_tokens", "query_tokens",
  // "recomputed_share", "hops": per layer, "recomputed_last_layer": [names], "encoded_tokens",
  // "encoded_caches" (caches computed since the last turn's end: puts), "rule", "step", and
  // "maintenance": {"action": "refresh", "seconds", "encoded_tokens", "encoded_caches"} when
  // Commit computed caches (groups promoted to static for the next step)}.
  Json Report() const override { return report_; }
  // text: the memory as text; cached: all of it; parts: the segments, {"kind": "segment",
  // "bytes", "name", "group", "static", "tokens"}.
  Json Inspect() const override;
  std::string_view text() const override { return {}; }
  std::optional<std::string_view> client_conversation() const override { return std::nullopt; }
  std::span<const int32_t> context_tokens() const override { return context_; }
  int64_t n_rows() const override;
  size_t bytes_in_use() const override { return pool_->bytes_in_use(); }

  const segments::KeepMemory& memory() const { return *keep_; }

 private:
  KeepPolicy(const PolicyEnv& env, kv::KvPool* pool) : env_(env), pool_(pool) {}
  bool needs_encoder() const;
  // Unit vectors (texts.size(), dim) under the compute lock; empty without an encoder.
  std::vector<float> Embed(std::vector<std::string> texts) const;
  // The memory as text and where each segment's text + "\n" begins in it.
  std::string MemoryText(std::vector<size_t>* starts) const;
  Result<Json> PutSegment(const std::string& name, const std::string& text);

  const PolicyEnv& env_;
  kv::KvPool* pool_;
  std::string prefix_text_;  // the turn around the segments (see the header comment)
  std::string suffix_text_;
  std::unique_ptr<segments::KeepMemory> keep_;
  // The open turn.
  std::unique_ptr<kv::KvSequence> working_;
  int64_t next_pos_ = 0;
  std::vector<int32_t> context_;
  Json report_;
  mutable std::optional<segments::KeepMemory::Persisted> snapshot_;
  mutable std::string snapshot_text_;
};

}  // namespace kvmem::memory
