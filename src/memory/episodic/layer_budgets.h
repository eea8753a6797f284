// EpiCache's sensitivity-aware layer budgets (Kim et al., "EpiCache: Episodic KV Cache
// Management for Long Conversational Question Answering", §3.2 Eq. 8-10 and the appendix's
// "Detailed Settings"). Block prefill evicts while it reads, so every token after the first
// block is computed against a cut-down history; layers whose keys move most under that cut
// (sensitive layers) get more of the KV budget, the others less.
//
//   1. ProfileKeySimilarity runs the same tokens twice over fresh sequences, once with the
//      causal mask M and once with the block-prefill mask M' (SensitivityMask), and gives
//      sigma_l = mean over KV heads h and tokens i of cos(k_full[l,h,i], k_block[l,h,i]) (Eq. 9).
//      Keys are read back stored (post-RoPE); both passes rotate a position's key identically,
//      so the cosine equals that of the un-rotated keys.
//   2. AllocateLayerBudgets splits L * M rows over the layers in proportion to s_l^alpha,
//      s_l = 1 - sigma_l (Eq. 10), in whole rows.
//   3. LoadOrProfileSensitivity profiles once per model on a fixed text and caches s_l by the
//      model's fingerprint (sensitivity is a property of the model, not of the input: Fig. 4a).
//
//   auto s = LoadOrProfileSensitivity(model, &threads, tok, fingerprint, presets_dir);
//   std::unique_ptr<bool[]> eligible = ...;  // (n_layers) true for global layers (see below)
//   std::vector<int64_t> rows =
//       AllocateLayerBudgets(*s, std::span(eligible.get(), n_layers), 1.2, 2048);
//
// Sliding-window layers are profiled like the others (their keys are computed the same way),
// but their memory is bounded by the window, not by a budget: the caller marks them ineligible.
// Where windows are shorter than the mask's overlap (Gemma-3: 512 < 2048), layers before the
// first global one read the same rows under both masks, so the keys up to and including that
// global layer cannot move: its s_l is 0 by construction and Eq. 10 leaves it the minimum.
//
// The cosine is Eq. 9's, per token. The official profiler instead takes, per head, the cosine of
// the keys of 100 consecutive tokens flattened into one vector and averages those; that weights
// tokens by their key norms within a window.
//
// Thread-safety: pure functions; the passes parallelize inside with the ThreadPool. Nothing is
// printed; the cache file is written atomically.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/kv_sequence.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::memory {

// The block-prefill mask M'. Followed: the official profiler (apple/ml-epicache
// data/layer_scores/layer_profile.py, `_create_block_only_mask`, its defaults
// attention_window_size 4096, overlap_ratio 0.5, sink_size 128): tokens are cut into blocks of
// `block`; token i of block b = i / block reads its own block causally, the `overlap` rows before
// the block's start, and — when i >= n_sink — the first n_sink rows of the text:
//
//   reads(i, j) = j <= i and (j >= FirstRecent(i) or (i >= n_sink and j < n_sink)),
//   FirstRecent(i) = max(0, (i / block) * block - overlap).
//
// (The paper's text describes M' as "sink tokens and the most recent tokens"; the code's block
// mask is what produced its figures, so it is what this follows.) One deviation, invisible at
// the official setting: the official mask clips the overlap to the one previous block; here it
// may reach further, so block = 1 gives StreamingLLM's sliding window (n_sink sinks + `overlap`
// recent rows + the token itself). With overlap <= block the two are the same mask.
struct SensitivityMask {
  int64_t n_sink = 128;
  int64_t block = 4096;
  int64_t overlap = 2048;

  int64_t FirstRecent(int64_t i) const;
  bool Reads(int64_t i, int64_t j) const;
  Status Validate() const;  // n_sink >= 0, block >= 1, overlap >= 0
};

// A pass of `tokens` at positions 0.. over the empty sequence `seq` under `mask`, in
// micro-batches of at most max_batch tokens, every row kept (seq's pool must have 256-row blocks;
// its window release must be off to read sliding-window layers back). Exact: rows before a
// micro-batch are given per token as engine::Batch::visible, and the batch's own rows, which the
// engine lets every later token of the batch read, are kept inside what the mask lets them read: a
// micro-batch [s, e) ends before the first token i with FirstRecent(i) > s.
Status ForwardBlockMasked(const model::Model& model, ThreadPool* pool, kv::KvSequence* seq,
                          std::span<const int32_t> tokens, const SensitivityMask& mask,
                          int max_batch = 256);

// sigma_l of Eq. 9 for every layer (n_layers), from a causal pass (engine::Forward's
// micro-batches) and a ForwardBlockMasked pass of `tokens` over fresh sequences in an f16 pool of
// its own (2 x tokens rows: for Gemma-3 270M, ~36 KiB a token). A pair of keys that is zero in
// either pass counts 1 if both are zero, else 0. Tokens within the mask's first block read the
// same rows in both passes and count exactly 1 in every layer: they scale every s_l alike, which
// Eq. 10 ignores.
Result<std::vector<double>> ProfileKeySimilarity(const model::Model& model, ThreadPool* pool,
                                                 std::span<const int32_t> tokens,
                                                 const SensitivityMask& mask);

// Eq. 10 in whole rows: the eligible layers share budget_per_layer x n_eligible rows in
// proportion to w_l = s_l^alpha; ineligible layers get 0. Rounding by largest remainder (ties to
// the lower layer), so the budgets sum exactly to the total and each is within one row of its
// real-valued share. Clamps: s_l that is negative or not finite counts as 0 (sigma can exceed 1
// by rounding only); where every eligible w_l is 0 (all s_l <= 0), or alpha == 0, the split is
// uniform; a layer rounded to 0 gets 1 row, taken from the layer with the largest budget (the
// lowest such layer), so every eligible layer keeps at least one row. budget_per_layer < 1 gives
// all zeros. Requires sensitivity.size() == eligible.size() and alpha >= 0.
std::vector<int64_t> AllocateLayerBudgets(std::span<const double> sensitivity,
                                          std::span<const bool> eligible, double alpha,
                                          int64_t budget_per_layer);

// The calibration text: the GNU GPL version 3 as Debian's base-files package ships it (on every
// Debian system): long, plain English prose, not a conversation (the paper samples one BookSum
// document "to avoid bias from any specific conversational dataset").
inline constexpr char kSensitivityText[] = "/usr/share/common-licenses/GPL-3";

struct SensitivityCalibration {
  std::string text_path = kSensitivityText;
  // The first n_tokens tokens of the text (with the tokenizer's BOS), fewer if the text or the
  // model's training context is shorter; more than mask.block are needed, else nothing is
  // masked. 16384 is the official profile's length (preproc_booksum.py's max_length: 4 blocks);
  // the GPL-3 text gives less, so all of it is used: 7,563 tokens with Gemma-3's tokenizer, one
  // whole block and 3,467 masked tokens, profiled in 15 s on 2 cores (Gemma-3 270M Q4_K_M).
  int64_t n_tokens = 16384;
  SensitivityMask mask;
};

// <cache_dir>/layer-sensitivity-<fingerprint>.json
std::string SensitivityCachePath(const std::string& cache_dir, std::string_view fingerprint);

// s_l = 1 - sigma_l (n_layers) of `model` on the calibration text, from cache_dir when a file
// there was computed for the same fingerprint, text tokens and mask, else profiled and written
// there (empty cache_dir or fingerprint: profiled every call, nothing written). The file is
// untrusted: one that cannot be read or parsed, was computed for other inputs, or holds other than
// n_layers finite values in [0, 2] is profiled again and replaced. Errors: the text unreadable or
// too short, the pass failing, or the cache not writable.
Result<std::vector<double>> LoadOrProfileSensitivity(
    const model::Model& model, ThreadPool* pool, const tokenizer::Tokenizer& tokenizer,
    std::string_view fingerprint, const std::string& cache_dir,
    const SensitivityCalibration& calibration = {});

}  // namespace kvmem::memory
