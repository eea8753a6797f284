// EpiCache's conversation clustering (Kim et al., 2025, §3.1 stages 1 and 3): the dialogue is cut
// into segments of w_embed utterances (Eq. 4), each segment is embedded by a sentence encoder
// (memory/embed/sentence_encoder.h, not used here), the embeddings are clustered into E topical
// episodes with k-means (Eq. 5), and each episode keeps its centroid, the mean of its members'
// embeddings, and its medoid, the member closest in cosine to the centroid (Eq. 6). The medoid
// segment(s) become the patched prompt that steers the episode's KV cache eviction; at decode time
// a query embedding is routed to the episode with the most similar centroid (Eq. 7).
//
//   SegmentUtterances   Eq. 4: the segments, consecutive windows of `window` utterances.
//   ClusterEpisodes     Eq. 5-6: k-means++ seeding, Lloyd iterations, centroids and medoids.
//   MedoidSegments      the n members of one episode closest to its centroid (the paper's
//                       "medoid segment of size 8" may span several segments).
//   RouteToEpisode      Eq. 7: the episode for a query embedding.
//   EpisodesToJson / EpisodesFromJson   the agent store's form; reading it trusts nothing.
//
// Embeddings are (n, dim) row-major floats. The sentence encoder's are unit vectors, but nothing
// here needs them to be: distances are squared Euclidean (as sklearn's KMeans, which the official
// code calls), similarities are cosines. Arithmetic is in double over the float inputs.
//
// Determinism: the result depends only on the inputs and the seed (a splitmix64 stream whose
// doubles are built from the raw 64-bit outputs, not from a standard library distribution), so
// it is the same on every platform and standard library. It does not reproduce sklearn's labels:
// sklearn seeds with "greedy" k-means++ (2 + log k candidates per centre, keeping the best); this
// is the original k-means++ of Arthur & Vassilvitskii, as the paper cites.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "core/status.h"

namespace kvmem::memory {

// Utterances [first, end) of the dialogue.
struct Segment {
  int64_t first = 0;
  int64_t end = 0;
};

// The official code's w_embed (ClusterManager conv_window).
inline constexpr int kDefaultSegmentWindow = 4;

// Eq. 4: ceil(n_utterances / window) segments of `window` consecutive utterances; the last one
// holds the remainder. None when n_utterances == 0. Preconditions: n_utterances >= 0, window >= 1.
std::vector<Segment> SegmentUtterances(int64_t n_utterances, int window);

struct Episodes {
  int k = 0;                    // number of episodes E; every one has at least one member
  int dim = 0;                  // embedding dimension d
  std::vector<int> assignment;  // (n): the episode of each segment, in [0, k)
  // (k, dim) row-major. Eq. 5-6: the mean of the members' embeddings, NOT renormalized (a mean of
  // unit vectors is shorter than 1; RouteToEpisode and the medoid use cosines, so its length
  // does not matter there).
  std::vector<float> centroids;
  std::vector<int> medoid;  // (k): Eq. 6, the member with the largest cos(e_i, c_e)
  double inertia = 0;       // sum over segments of the squared distance to their centroid

  int n() const { return static_cast<int>(assignment.size()); }
  std::span<const float> centroid(int e) const {
    return std::span<const float>(centroids).subspan(static_cast<size_t>(e) * dim, dim);
  }
};

// The official code's KMeans(n_init=10): restarts from fresh k-means++ seeds, keeping the one
// with the lowest inertia.
inline constexpr int kDefaultKMeansRestarts = 10;
// sklearn's max_iter: Lloyd iterations per restart.
inline constexpr int kMaxLloydIterations = 300;

// Eq. 5-6: k-means of the n rows of `embeddings` (n, dim) into min(k, n) episodes.
//   Seeding: k-means++, the first centre uniform among the points, each next one drawn with
//     probability proportional to the squared distance to the nearest centre chosen so far (when
//     every point coincides with a centre, uniform among the points not yet chosen).
//   Lloyd: assign each point to its nearest centroid, move each centroid to its members' mean,
//     until no assignment changes or kMaxLloydIterations. A point moves only to a strictly nearer
//     centroid (initially, ties go to the lower index), so exact ties cannot cycle. A cluster
//     left empty is re-seeded with the point farthest from its own centroid, as sklearn does,
//     but taken only from a cluster of two or more points, so every episode keeps members.
//   Restarts: n_init seedings from one seeded stream; the lowest inertia wins, ties to the
//     earlier one.
// On return the centroids are always the means of the assignment (Eq. 5); the assignment is a
// nearest-centroid one unless the iteration cap was reached first.
// Preconditions: embeddings.size() == n * dim, n >= 0, dim >= 1, k >= 0, n_init >= 1, finite
// values.
Episodes ClusterEpisodes(std::span<const float> embeddings, int n, int dim, int k, uint64_t seed,
                         int n_init = kDefaultKMeansRestarts);

// The (at most) `count` members of `episode`, by descending cosine to its centroid (ties to the
// lower index); the first is episodes.medoid[episode]. The official code orders the chosen
// segments chronologically again when it writes the patched prompt; that is the caller's step.
// Preconditions: `embeddings` are the (n, dim) rows that were clustered, 0 <= episode < k.
std::vector<int> MedoidSegments(const Episodes& episodes, std::span<const float> embeddings,
                                int episode, int count);

// Eq. 7: the episode whose centroid has the largest cosine with `query` (dim floats), ties to the
// lower index; -1 when there are none. A zero vector has cosine 0 with everything. (The official
// code scores with the dot product against the unnormalized centroid, which favours tight
// episodes; the paper's Eq. 7, used here, is the cosine.)
int RouteToEpisode(const Episodes& episodes, std::span<const float> query);

// {"k", "dim", "assignment": [n ints], "centroids": [k*dim numbers], "medoid": [k ints],
//  "inertia": number}. Floats are JSON numbers: nlohmann writes the shortest decimal that reads
// back to the same double, and a float widened to double reads back to the same float, so the
// round trip is exact.
nlohmann::json EpisodesToJson(const Episodes& episodes);

// Reads EpisodesToJson's form from untrusted JSON. Corrupt, naming the field, for a missing field,
// a wrong type, a size that does not match k, n and dim, a centroid component that is not a
// finite float, a negative or non-finite inertia, an assignment outside [0, k), or a medoid that
// is not a member of its episode; InvalidArgument when dim != expected_dim (clustered by another
// encoder).
Result<Episodes> EpisodesFromJson(const nlohmann::json& j, int expected_dim);

}  // namespace kvmem::memory
