#include "memory/episodic/episodes.h"

#include <algorithm>
#include <cassert>
#include <cfloat>
#include <cmath>
#include <limits>
#include <string>

#include "memory/store/json_util.h"

namespace kvmem::memory {
namespace {

using Json = nlohmann::json;

// splitmix64 (Steele, Lea and Flood, 2014; the generator that seeds xoshiro): a 64-bit state
// advanced by a constant and mixed. Doubles and indices are derived from the raw outputs here, so
// the stream is the same everywhere (std::uniform_real_distribution is implementation-defined).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1): the top 53 bits as a multiple of 2^-53.
  double NextDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform in [0, n), n >= 1 (the bias of floor(u * n) is below 2^-53 * n, irrelevant here).
  int NextIndex(int n) {
    return std::min(n - 1, static_cast<int>(NextDouble() * static_cast<double>(n)));
  }

 private:
  uint64_t state_;
};

// The rows being clustered: (n, dim) row-major.
struct Rows {
  std::span<const float> data;
  int n = 0;
  int dim = 0;
  const float* row(int i) const { return data.data() + static_cast<size_t>(i) * dim; }
};

double SquaredDistance(const float* a, const float* b, int dim) {
  double s = 0;
  for (int d = 0; d < dim; ++d) {
    const double diff = static_cast<double>(a[d]) - static_cast<double>(b[d]);
    s += diff * diff;
  }
  return s;
}

// 0 when either vector is zero.
double Cosine(const float* a, const float* b, int dim) {
  double dot = 0, na = 0, nb = 0;
  for (int d = 0; d < dim; ++d) {
    dot += static_cast<double>(a[d]) * b[d];
    na += static_cast<double>(a[d]) * a[d];
    nb += static_cast<double>(b[d]) * b[d];
  }
  if (na == 0 || nb == 0) return 0;
  return dot / (std::sqrt(na) * std::sqrt(nb));
}

const float* CentroidRow(const std::vector<float>& centroids, int e, int dim) {
  return centroids.data() + static_cast<size_t>(e) * dim;
}

// k-means++ (Arthur & Vassilvitskii, 2007). Returns the (k, dim) initial centroids.
std::vector<float> SeedKMeansPlusPlus(const Rows& x, int k, SplitMix64& rng) {
  std::vector<float> centroids(static_cast<size_t>(k) * x.dim);
  std::vector<bool> chosen(x.n, false);
  std::vector<double> d2(x.n, std::numeric_limits<double>::infinity());  // to the nearest centre
  for (int c = 0; c < k; ++c) {
    int pick = -1;
    double total = 0;
    for (int i = 0; i < x.n && c > 0; ++i) total += d2[i];
    if (c > 0 && total > 0) {
      // The first point whose cumulative weight passes u; rounding can only leave u past the
      // last step, which falls back to the last point of positive weight.
      const double u = rng.NextDouble() * total;
      double cumulative = 0;
      for (int i = 0; i < x.n; ++i) {
        if (d2[i] <= 0) continue;
        pick = i;
        cumulative += d2[i];
        if (cumulative > u) break;
      }
    } else {
      // The first centre, or every point already sits on a centre: uniform among the points not
      // chosen yet (k <= n leaves n - c of them).
      int r = rng.NextIndex(x.n - c);
      for (int i = 0; i < x.n; ++i) {
        if (chosen[i]) continue;
        if (r-- == 0) {
          pick = i;
          break;
        }
      }
    }
    assert(pick >= 0 && !chosen[pick]);
    chosen[pick] = true;
    std::copy_n(x.row(pick), x.dim, centroids.begin() + static_cast<ptrdiff_t>(c) * x.dim);
    for (int i = 0; i < x.n; ++i) {
      d2[i] = std::min(d2[i], SquaredDistance(x.row(i), x.row(pick), x.dim));
    }
  }
  return centroids;
}

// Lloyd's assignment step. A point leaves its current centroid only for a strictly nearer one;
// an unassigned point (-1) takes the nearest, ties to the lower index. Returns whether any
// assignment changed.
bool AssignToNearest(const Rows& x, const std::vector<float>& centroids, int k,
                     std::vector<int>* assignment) {
  bool changed = false;
  for (int i = 0; i < x.n; ++i) {
    const int current = (*assignment)[i];
    int best = current >= 0 ? current : 0;
    double best_d2 = SquaredDistance(x.row(i), CentroidRow(centroids, best, x.dim), x.dim);
    for (int e = 0; e < k; ++e) {
      const double d2 = SquaredDistance(x.row(i), CentroidRow(centroids, e, x.dim), x.dim);
      if (d2 < best_d2) {
        best = e;
        best_d2 = d2;
      }
    }
    if (best != current) {
      (*assignment)[i] = best;
      changed = true;
    }
  }
  return changed;
}

// Gives each empty cluster the point farthest from its own centroid, taken from a cluster with
// two or more points (one always exists while k <= n). Distances are to `centroids`, the
// centroids the assignment was made against.
void ReseedEmptyClusters(const Rows& x, const std::vector<float>& centroids, int k,
                         std::vector<int>* assignment, std::vector<int>* counts) {
  std::vector<double> own_d2;  // computed on the first empty cluster; -1 once a point moved
  for (int e = 0; e < k; ++e) {
    if ((*counts)[e] > 0) continue;
    if (own_d2.empty()) {
      own_d2.resize(x.n);
      for (int i = 0; i < x.n; ++i) {
        own_d2[i] =
            SquaredDistance(x.row(i), CentroidRow(centroids, (*assignment)[i], x.dim), x.dim);
      }
    }
    int far = -1;
    for (int i = 0; i < x.n; ++i) {
      if (own_d2[i] < 0 || (*counts)[(*assignment)[i]] < 2) continue;
      if (far < 0 || own_d2[i] > own_d2[far]) far = i;
    }
    assert(far >= 0);
    --(*counts)[(*assignment)[far]];
    (*assignment)[far] = e;
    (*counts)[e] = 1;
    own_d2[far] = -1;
  }
}

// Lloyd's update step (Eq. 5): each centroid becomes the mean of its members, after empty
// clusters are re-seeded (which may move points). Sums in double, in point order.
void MoveCentroidsToMeans(const Rows& x, int k, std::vector<int>* assignment,
                          std::vector<float>* centroids) {
  std::vector<int> counts(k, 0);
  for (int a : *assignment) ++counts[a];
  ReseedEmptyClusters(x, *centroids, k, assignment, &counts);
  std::vector<double> sums(static_cast<size_t>(k) * x.dim, 0.0);  // (k, dim)
  for (int i = 0; i < x.n; ++i) {
    double* sum = sums.data() + static_cast<size_t>((*assignment)[i]) * x.dim;
    const float* row = x.row(i);
    for (int d = 0; d < x.dim; ++d) sum[d] += row[d];
  }
  for (int e = 0; e < k; ++e) {
    for (int d = 0; d < x.dim; ++d) {
      const size_t at = static_cast<size_t>(e) * x.dim + d;
      (*centroids)[at] = static_cast<float>(sums[at] / counts[e]);
    }
  }
}

double Inertia(const Rows& x, const std::vector<float>& centroids,
               const std::vector<int>& assignment) {
  double s = 0;
  for (int i = 0; i < x.n; ++i) {
    s += SquaredDistance(x.row(i), CentroidRow(centroids, assignment[i], x.dim), x.dim);
  }
  return s;
}

// One seeding and its Lloyd iterations; medoids are left for the winning restart.
Episodes RunKMeans(const Rows& x, int k, SplitMix64& rng) {
  Episodes out;
  out.k = k;
  out.dim = x.dim;
  out.centroids = SeedKMeansPlusPlus(x, k, rng);
  out.assignment.assign(x.n, -1);
  AssignToNearest(x, out.centroids, k, &out.assignment);
  bool converged = false;
  for (int iter = 0; iter < kMaxLloydIterations && !converged; ++iter) {
    MoveCentroidsToMeans(x, k, &out.assignment, &out.centroids);
    converged = !AssignToNearest(x, out.centroids, k, &out.assignment);
  }
  // At the cap the last assignment step moved points: keep Eq. 5 true for the final assignment.
  if (!converged) MoveCentroidsToMeans(x, k, &out.assignment, &out.centroids);
  out.inertia = Inertia(x, out.centroids, out.assignment);
  return out;
}

Status FieldError(const std::string& field, const std::string& what) {
  return Corrupt("field '" + field + "' " + what);
}

}  // namespace

std::vector<Segment> SegmentUtterances(int64_t n_utterances, int window) {
  assert(n_utterances >= 0 && window >= 1);
  std::vector<Segment> segments;
  if (n_utterances <= 0 || window < 1) return segments;
  segments.reserve(static_cast<size_t>((n_utterances + window - 1) / window));
  for (int64_t first = 0; first < n_utterances; first += window) {
    segments.push_back({first, std::min<int64_t>(first + window, n_utterances)});
  }
  return segments;
}

Episodes ClusterEpisodes(std::span<const float> embeddings, int n, int dim, int k, uint64_t seed,
                         int n_init) {
  assert(n >= 0 && dim >= 1 && k >= 0 && n_init >= 1);
  assert(embeddings.size() == static_cast<size_t>(n) * dim);
  k = std::min(k, n);
  if (k <= 0) {
    Episodes none;
    none.dim = dim;
    return none;
  }
  const Rows x{embeddings, n, dim};
  SplitMix64 rng(seed);
  Episodes best;
  for (int restart = 0; restart < std::max(n_init, 1); ++restart) {
    Episodes candidate = RunKMeans(x, k, rng);
    if (restart == 0 || candidate.inertia < best.inertia) best = std::move(candidate);
  }
  best.medoid.resize(k);
  for (int e = 0; e < k; ++e) best.medoid[e] = MedoidSegments(best, embeddings, e, 1).front();
  return best;
}

std::vector<int> MedoidSegments(const Episodes& episodes, std::span<const float> embeddings,
                                int episode, int count) {
  assert(0 <= episode && episode < episodes.k);
  assert(embeddings.size() == static_cast<size_t>(episodes.n()) * episodes.dim);
  const int dim = episodes.dim;
  const float* centroid = episodes.centroid(episode).data();
  std::vector<std::pair<double, int>> members;  // (cosine to the centroid, segment)
  for (int i = 0; i < episodes.n(); ++i) {
    if (episodes.assignment[i] != episode) continue;
    members.emplace_back(Cosine(embeddings.data() + static_cast<size_t>(i) * dim, centroid, dim),
                         i);
  }
  std::stable_sort(members.begin(), members.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<int> top;
  for (int r = 0; r < static_cast<int>(members.size()) && r < count; ++r) {
    top.push_back(members[r].second);
  }
  return top;
}

int RouteToEpisode(const Episodes& episodes, std::span<const float> query) {
  assert(query.size() == static_cast<size_t>(episodes.dim));
  int best = -1;
  double best_cos = 0;
  for (int e = 0; e < episodes.k; ++e) {
    const double c = Cosine(query.data(), episodes.centroid(e).data(), episodes.dim);
    if (best < 0 || c > best_cos) {
      best = e;
      best_cos = c;
    }
  }
  return best;
}

Json EpisodesToJson(const Episodes& episodes) {
  Json j = Json::object();
  j["k"] = episodes.k;
  j["dim"] = episodes.dim;
  j["assignment"] = episodes.assignment;
  j["centroids"] = episodes.centroids;  // each float widened to double, exactly
  j["medoid"] = episodes.medoid;
  j["inertia"] = episodes.inertia;
  return j;
}

Result<Episodes> EpisodesFromJson(const Json& j, int expected_dim) {
  using store::JsonArray;
  using store::JsonField;
  using store::JsonInt;
  using store::JsonIntValue;
  const std::string path = "episodes";
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  Episodes out;

  KVMEM_ASSIGN_OR_RETURN(const int64_t k, JsonInt(j, "k", path, 0, kIntMax));
  KVMEM_ASSIGN_OR_RETURN(const int64_t dim, JsonInt(j, "dim", path, 1, kIntMax));
  if (dim != expected_dim) {
    return InvalidArgument("field 'episodes.dim' = " + std::to_string(dim) + ", expected " +
                           std::to_string(expected_dim) + " (clustered with another encoder?)");
  }
  out.k = static_cast<int>(k);
  out.dim = static_cast<int>(dim);

  KVMEM_ASSIGN_OR_RETURN(const Json* assignment, JsonArray(j, "assignment", path));
  if (assignment->size() > static_cast<size_t>(kIntMax)) {
    return FieldError("episodes.assignment", "has too many entries");
  }
  if (k == 0 && !assignment->empty()) {
    return FieldError("episodes.assignment", "has entries but k = 0");
  }
  out.assignment.reserve(assignment->size());
  for (size_t i = 0; i < assignment->size(); ++i) {
    KVMEM_ASSIGN_OR_RETURN(
        const int64_t a,
        JsonIntValue((*assignment)[i], "episodes.assignment[" + std::to_string(i) + "]", 0, k - 1));
    out.assignment.push_back(static_cast<int>(a));
  }

  KVMEM_ASSIGN_OR_RETURN(const Json* centroids, JsonArray(j, "centroids", path));
  const uint64_t n_values = static_cast<uint64_t>(k) * static_cast<uint64_t>(dim);
  if (centroids->size() != n_values) {
    return FieldError("episodes.centroids",
                      "has " + std::to_string(centroids->size()) +
                          " values, expected k * dim = " + std::to_string(n_values));
  }
  out.centroids.reserve(n_values);
  for (size_t i = 0; i < centroids->size(); ++i) {
    const Json& v = (*centroids)[i];
    const std::string field = "episodes.centroids[" + std::to_string(i) + "]";
    if (!v.is_number())
      return FieldError(field, "is " + std::string(v.type_name()) + ", expected a number");
    const double value = v.get<double>();
    if (!std::isfinite(value) || std::fabs(value) > FLT_MAX) {
      return FieldError(field, "= " + v.dump() + " is not a finite float");
    }
    out.centroids.push_back(static_cast<float>(value));
  }

  KVMEM_ASSIGN_OR_RETURN(const Json* medoid, JsonArray(j, "medoid", path));
  if (medoid->size() != static_cast<size_t>(k)) {
    return FieldError("episodes.medoid", "has " + std::to_string(medoid->size()) +
                                             " entries, expected k = " + std::to_string(k));
  }
  const int64_t n = static_cast<int64_t>(out.assignment.size());
  out.medoid.reserve(k);
  for (int64_t e = 0; e < k; ++e) {
    const std::string field = "episodes.medoid[" + std::to_string(e) + "]";
    KVMEM_ASSIGN_OR_RETURN(const int64_t m, JsonIntValue((*medoid)[e], field, 0, n - 1));
    if (out.assignment[m] != e) {
      return FieldError(field, "= " + std::to_string(m) + " is a member of episode " +
                                   std::to_string(out.assignment[m]) + ", not of episode " +
                                   std::to_string(e));
    }
    out.medoid.push_back(static_cast<int>(m));
  }

  KVMEM_ASSIGN_OR_RETURN(const Json* inertia, JsonField(j, "inertia", path));
  if (!inertia->is_number()) {
    return FieldError("episodes.inertia",
                      "is " + std::string(inertia->type_name()) + ", expected a number");
  }
  out.inertia = inertia->get<double>();
  if (!std::isfinite(out.inertia) || out.inertia < 0) {
    return FieldError("episodes.inertia", "= " + inertia->dump() + " is not a finite value >= 0");
  }
  return out;
}

}  // namespace kvmem::memory
