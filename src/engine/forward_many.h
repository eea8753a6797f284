// One forward pass over pieces of many sequences: the step of a server that serves many agents
// at once (semantic.md §3.6). Decode is bound by reading the weights, so every matmul runs once
// over all the pieces' tokens; each piece's K/V rows go to its own sequence's pool and its tokens
// attend over that sequence's view only (its own rows, formats and visibility), so no piece can
// read another's memory.
//
//   std::vector<float> la, lb;
//   SeqPiece pieces[] = {{&seq_a, {&tok_a, 1}, pos_a, false, &la},   // a decode step
//                        {&seq_b, prompt_chunk, pos_b, false, &lb}}; // a prefill chunk
//   ForwardMany(model, pool, pieces, &scratch);  // then pieces[i].status, la, lb
//
// A piece is what engine::Forward takes in one micro-batch: tokens at consecutive positions from
// first_pos, appended to seq, logits for the last token or all of them. A piece that fails its
// checks (token ids, released sliding-window rows, pool space) gets its status and leaves the
// others running. Each token's result is the one engine::Forward computes for it alone: the
// matmuls treat tokens independently and attention's chunking depends only on the rows a token
// reads (tests/engine/forward_many_test.cpp checks bit-identical logits).
// Not thread-safe: one call at a time per pool of threads; pieces name distinct sequences.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/kv_sequence.h"
#include "model/model.h"
#include "model/transformer_block.h"

namespace kvmem::engine {

struct SeqPiece {
  kv::KvSequence* seq = nullptr;
  std::span<const int32_t> tokens = {};
  int64_t first_pos = 0;
  bool all_logits = false;
  std::vector<float>* logits = nullptr;  // out: (n_tokens or 1, n_vocab)
  Status status = Status::Ok();          // out
};

// Buffers reused from step to step.
struct ManyScratch {
  model::BlockScratch block;
  std::vector<float> x;       // (n_tokens, n_embd)
  std::vector<float> x_out;   // rows that give logits
  std::vector<float> logits;  // (rows that give logits, n_vocab)
  std::vector<int32_t> tokens;
  std::vector<int64_t> positions;
  std::vector<model::AttendPiece> attend;
};

void ForwardMany(const model::Model& model, ThreadPool* pool, std::span<SeqPiece> pieces,
                 ManyScratch* scratch);

}  // namespace kvmem::engine
