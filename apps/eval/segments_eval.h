// `kvmem eval segments` (issue 25): KEEP against its baselines on text worlds
// (scripts/gen_textworld.py, docs/eval/segments.md). Each world's segments are the memory; at
// each step the updates are applied and the query answered by every method, in turn:
//   full        the reference: prefix, every segment and the query prefilled from scratch
//   prefix      the last step's cache reused up to the first token that differs
//   reuse       every segment a cache of its own, placed as it is (no recomputation)
//   cacheblend  consecutive segments packed into chunks of ~chunk_tokens tokens (a chunk with a
//               changed segment is prefilled again), tokens recomputed by layer-0 KV deviation
//   keep        static-dynamic groups, multi-hop recomputation (memory/segments/keep_memory.h)
//   keep-nosd   KEEP without static-dynamic construction (every segment its own cache)
//   keep-1hop   KEEP without multi-hop (the query's attention alone chooses)
//   keep-q      KEEP with the query a source of every propagation round (importance.h)
// Per step and method: TTFT (updates' cache work included: the planner waits for it), tokens
// prefilled (cache work plus the share of segment tokens recomputed over layers plus the query),
// NLL of the gold answer, KL of the first answer token's distribution to full's, and whether the
// greedy answer equals full's.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "memory/embed/sentence_encoder.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::eval {

struct TextWorld {
  struct Update {
    std::string name;
    std::string text;
    bool remove = false;
  };
  struct Step {
    std::vector<Update> updates;
    std::string query;
    std::string answer;
    std::vector<std::string> needs;
  };
  std::string id;
  std::string system;
  std::vector<std::pair<std::string, std::string>> segments;  // (name, text), memory order
  std::vector<Step> steps;
};

// One world per JSONL line; InvalidArgument naming the line for anything off the format.
Result<std::vector<TextWorld>> ReadTextWorlds(const std::string& path);

struct SegmentsEvalOptions {
  std::vector<std::string> methods = {"full", "prefix", "reuse", "cacheblend", "keep"};
  double ratio = 0.15;  // mean recompute share (cacheblend, keep*)
  int top_k = 0;        // keep*: segments read per query; 0 all
  int static_after = 10;
  int group_size = 8;
  int chunk_tokens = 128;  // cacheblend
  int max_steps = 0;       // per world; 0 all
  int answer_tokens = 8;   // greedy answer length
};

// Calls `row` with one JSON object per (world, step, method) as it is measured.
Status RunSegmentsEval(const model::Model& model, const tokenizer::Tokenizer& tok,
                       const tokenizer::ChatTemplate& tmpl,
                       const memory::embed::SentenceEncoder* encoder, ThreadPool* pool,
                       const std::vector<TextWorld>& worlds, const SegmentsEvalOptions& options,
                       const std::function<void(const nlohmann::ordered_json&)>& row);

}  // namespace kvmem::eval
