// KEEP's choice of the memory segments to recompute in the next layer (Yang et al., 2025, §4.2,
// "Multi-hop Memory Re-computation"), and the per-layer recompute ratios it follows (CacheBlend's
// schedule: every segment in the first layer, fewer in later ones).
//
// Importance is read from one layer's attention:
//   query[s]     the query tokens' average attention weight on a row of segment s
//   cross[a][b]  segment a's tokens' average attention weight on a row of segment b (0 where a
//                cannot see b: attention is causal, so a segment reads only earlier ones)
// MultiHopSelect then follows the paper's steps:
//   initialization  importance = query
//   propagation     the relevant set R = the most important segments that fit the layer's
//                   budget of tokens; importance is recomputed as the average, over the
//                   segments of R, of the attention they pay each segment ("averaging the
//                   cross-attention weights from the current relevant memory set")
//   convergence     repeat until R is the same twice (or max_hops rounds)
// Variant (kvmem's, measured in docs/eval/keep.md): the query stays one of the sources of every
// round (query_source), so a chain cannot forget its start, the door that made the key
// important; read literally the paper's rounds use R alone.
// SingleHopSelect is the ablation "without multi-hop": R from the query's attention alone.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvmem::memory::segments {

struct LayerImportance {
  std::vector<double> query;               // (n)
  std::vector<std::vector<double>> cross;  // (n)(n)
  std::vector<int64_t> tokens;             // (n) tokens of each segment
};

// The segments with the highest scores whose tokens fit `budget` (always at least the best one
// when budget > 0 and n > 0; none when budget <= 0), ascending indices. Ties go to the lower
// index; a segment that does not fit is skipped and smaller later ones may still fit.
std::vector<int> TopByTokens(std::span<const double> score, std::span<const int64_t> tokens,
                             int64_t budget);

inline constexpr int kMaxHops = 8;

// Ascending indices of the relevant set; *hops (optional): propagation rounds run.
std::vector<int> MultiHopSelect(const LayerImportance& in, int64_t budget, int max_hops = kMaxHops,
                                int* hops = nullptr, bool query_source = false);
std::vector<int> SingleHopSelect(const LayerImportance& in, int64_t budget);

// (n_layers) share of memory tokens recomputed in each layer: 1 in layer 0, then decreasing
// linearly so that the mean over all layers is `average` (clamped to [0, 1] per layer; an
// average at or above 1 recomputes everything, at or below 1/n_layers only layer 0).
std::vector<double> RecomputeRatios(int n_layers, double average);

// The same mean with CacheBlend's fixed ratio: 1 in layer 0, one constant ratio after it.
std::vector<double> FixedRecomputeRatios(int n_layers, double average);

}  // namespace kvmem::memory::segments
