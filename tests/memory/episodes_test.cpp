// EpiCache's segment clustering (memory/episodic/episodes.h) against references written here:
//   - SegmentUtterances: Eq. 4's ceil(n / w) contiguous windows, on edge cases and a sweep;
//   - ClusterEpisodes: Gaussian blobs (std::mt19937 with a hand-written Box-Muller) recovered up
//     to a relabelling; the result a fixed point of Lloyd (nearest centroids and member means
//     recomputed in double); the same seed giving the same bits and other seeds the same blob
//     optimum; inertia bounded by the one-cluster solution and 0 at k = n; k clamped to n;
//     duplicate points still filling every episode;
//   - medoids and MedoidSegments against a brute-force cosine ranking;
//   - RouteToEpisode against a brute-force cosine argmax (and not the dot product);
//   - the JSON form: an exact round trip, and hostile documents refused with the field named.
#include "memory/episodic/episodes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numbers>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace kvmem::memory {
namespace {

using Json = nlohmann::json;

// Standard normal from two uniforms in (0, 1), built from the raw 32-bit outputs so the data do
// not depend on the standard library's distributions.
double Normal(std::mt19937& g) {
  const double u1 = (static_cast<double>(g()) + 0.5) / 4294967296.0;
  const double u2 = (static_cast<double>(g()) + 0.5) / 4294967296.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

void Normalize(float* v, int dim) {
  double s = 0;
  for (int d = 0; d < dim; ++d) s += static_cast<double>(v[d]) * v[d];
  const double inv = 1.0 / std::sqrt(s);
  for (int d = 0; d < dim; ++d) v[d] = static_cast<float>(v[d] * inv);
}

// n random unit vectors, (n, dim).
std::vector<float> RandomUnitRows(int n, int dim, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<float> x(static_cast<size_t>(n) * dim);
  for (auto& v : x) v = static_cast<float>(Normal(g));
  for (int i = 0; i < n; ++i) Normalize(x.data() + static_cast<size_t>(i) * dim, dim);
  return x;
}

struct Blobs {
  std::vector<float> x;    // (n, dim) unit vectors
  std::vector<int> label;  // (n) the blob of each point
};

// n_blobs blobs around orthogonal unit directions (e_0, e_1, ...), sigma per component, then
// normalized like sentence embeddings; points interleaved (point i in blob i % n_blobs).
Blobs MakeBlobs(int n_blobs, int per_blob, int dim, double sigma, uint32_t seed) {
  std::mt19937 g(seed);
  Blobs b;
  const int n = n_blobs * per_blob;
  b.x.resize(static_cast<size_t>(n) * dim);
  for (int i = 0; i < n; ++i) {
    const int blob = i % n_blobs;
    b.label.push_back(blob);
    float* row = b.x.data() + static_cast<size_t>(i) * dim;
    for (int d = 0; d < dim; ++d) {
      row[d] = static_cast<float>((d == blob ? 1.0 : 0.0) + sigma * Normal(g));
    }
    Normalize(row, dim);
  }
  return b;
}

double RefSquaredDistance(const float* a, const float* b, int dim) {
  double s = 0;
  for (int d = 0; d < dim; ++d) s += (double{a[d]} - b[d]) * (double{a[d]} - b[d]);
  return s;
}

double RefCosine(const float* a, const float* b, int dim) {
  double dot = 0, na = 0, nb = 0;
  for (int d = 0; d < dim; ++d) {
    dot += double{a[d]} * b[d];
    na += double{a[d]} * a[d];
    nb += double{b[d]} * b[d];
  }
  return dot / std::sqrt(na * nb);
}

const float* Row(const std::vector<float>& x, int i, int dim) {
  return x.data() + static_cast<size_t>(i) * dim;
}

// Sum of squared distances to the overall mean: the inertia of the one-cluster solution.
double OneClusterInertia(const std::vector<float>& x, int n, int dim) {
  std::vector<double> mean(dim, 0.0);
  for (int i = 0; i < n; ++i) {
    for (int d = 0; d < dim; ++d) mean[d] += Row(x, i, dim)[d];
  }
  double s = 0;
  for (int i = 0; i < n; ++i) {
    for (int d = 0; d < dim; ++d) {
      const double diff = Row(x, i, dim)[d] - mean[d] / n;
      s += diff * diff;
    }
  }
  return s;
}

// True if the two labellings are the same partition (a bijection maps one onto the other).
bool SamePartition(const std::vector<int>& a, const std::vector<int>& b) {
  if (a.size() != b.size()) return false;
  std::map<int, int> ab, ba;
  for (size_t i = 0; i < a.size(); ++i) {
    if (ab.emplace(a[i], b[i]).first->second != b[i]) return false;
    if (ba.emplace(b[i], a[i]).first->second != a[i]) return false;
  }
  return true;
}

// The properties every ClusterEpisodes result has, checked against references in double.
void ExpectLloydFixedPoint(const Episodes& ep, const std::vector<float>& x, int n, int dim) {
  ASSERT_EQ(ep.dim, dim);
  ASSERT_EQ(ep.n(), n);
  ASSERT_EQ(ep.centroids.size(), static_cast<size_t>(ep.k) * dim);
  ASSERT_EQ(ep.medoid.size(), static_cast<size_t>(ep.k));
  std::vector<int> count(ep.k, 0);
  std::vector<double> sum(static_cast<size_t>(ep.k) * dim, 0.0);
  for (int i = 0; i < n; ++i) {
    const int a = ep.assignment[i];
    ASSERT_GE(a, 0);
    ASSERT_LT(a, ep.k);
    ++count[a];
    for (int d = 0; d < dim; ++d) sum[static_cast<size_t>(a) * dim + d] += Row(x, i, dim)[d];
  }
  for (int e = 0; e < ep.k; ++e) {
    ASSERT_GT(count[e], 0) << "episode " << e << " is empty";
    for (int d = 0; d < dim; ++d) {
      // The centroid is the member mean (Eq. 5), rounded once to float.
      const double mean = sum[static_cast<size_t>(e) * dim + d] / count[e];
      EXPECT_NEAR(ep.centroids[static_cast<size_t>(e) * dim + d], mean, 1e-6)
          << "episode " << e << " component " << d;
    }
  }
  double inertia = 0;
  for (int i = 0; i < n; ++i) {
    const double own =
        RefSquaredDistance(Row(x, i, dim), ep.centroid(ep.assignment[i]).data(), dim);
    inertia += own;
    for (int e = 0; e < ep.k; ++e) {
      EXPECT_LE(own, RefSquaredDistance(Row(x, i, dim), ep.centroid(e).data(), dim) + 1e-12)
          << "point " << i << " is nearer episode " << e << " than its own " << ep.assignment[i];
    }
  }
  EXPECT_NEAR(ep.inertia, inertia, 1e-9 * std::max(1.0, inertia));
}

TEST(EpisodesSegment, EdgeCases) {
  EXPECT_TRUE(SegmentUtterances(0, 4).empty());
  EXPECT_TRUE(SegmentUtterances(0, 1).empty());

  const auto ten = SegmentUtterances(10, 4);  // 4 + 4 + 2
  ASSERT_EQ(ten.size(), 3u);
  EXPECT_EQ(ten[0].first, 0);
  EXPECT_EQ(ten[0].end, 4);
  EXPECT_EQ(ten[1].first, 4);
  EXPECT_EQ(ten[1].end, 8);
  EXPECT_EQ(ten[2].first, 8);
  EXPECT_EQ(ten[2].end, 10);

  const auto eight = SegmentUtterances(8, 4);  // exact multiple: no short tail
  ASSERT_EQ(eight.size(), 2u);
  EXPECT_EQ(eight[1].first, 4);
  EXPECT_EQ(eight[1].end, 8);

  const auto ones = SegmentUtterances(5, 1);
  ASSERT_EQ(ones.size(), 5u);
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(ones[i].first, i);
    EXPECT_EQ(ones[i].end, i + 1);
  }

  const auto wide = SegmentUtterances(3, kDefaultSegmentWindow);  // window past the end
  ASSERT_EQ(wide.size(), 1u);
  EXPECT_EQ(wide[0].first, 0);
  EXPECT_EQ(wide[0].end, 3);
}

TEST(EpisodesSegment, WindowsTileTheDialogue) {
  for (int64_t n = 0; n <= 40; ++n) {
    for (int w = 1; w <= 9; ++w) {
      const auto s = SegmentUtterances(n, w);
      ASSERT_EQ(static_cast<int64_t>(s.size()), (n + w - 1) / w) << n << " " << w;
      int64_t next = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        EXPECT_EQ(s[i].first, next);
        EXPECT_EQ(s[i].end - s[i].first, i + 1 < s.size() ? w : n - next) << n << " " << w;
        next = s[i].end;
      }
      EXPECT_EQ(next, n);
    }
  }
}

TEST(EpisodesCluster, RecoversSeparatedBlobs) {
  constexpr int kBlobs = 4, kPer = 30, kDim = 16;
  const Blobs b = MakeBlobs(kBlobs, kPer, kDim, 0.05, 7);
  for (uint64_t seed : {0ull, 1ull, 2ull, 42ull, 12345ull}) {
    const Episodes ep = ClusterEpisodes(b.x, kBlobs * kPer, kDim, kBlobs, seed);
    ASSERT_EQ(ep.k, kBlobs);
    EXPECT_TRUE(SamePartition(ep.assignment, b.label)) << "seed " << seed;
    ExpectLloydFixedPoint(ep, b.x, kBlobs * kPer, kDim);
  }
}

TEST(EpisodesCluster, ResultIsALloydFixedPoint) {
  constexpr int kN = 200, kDim = 8;
  const std::vector<float> x = RandomUnitRows(kN, kDim, 11);
  for (int k : {1, 2, 6, 13}) {
    for (uint64_t seed : {3ull, 99ull}) {
      SCOPED_TRACE("k " + std::to_string(k) + " seed " + std::to_string(seed));
      const Episodes ep = ClusterEpisodes(x, kN, kDim, k, seed, /*n_init=*/2);
      ASSERT_EQ(ep.k, k);
      ExpectLloydFixedPoint(ep, x, kN, kDim);
    }
  }
}

TEST(EpisodesCluster, SameSeedSameBitsOtherSeedsSameBlobOptimum) {
  constexpr int kN = 150, kDim = 12;
  const std::vector<float> x = RandomUnitRows(kN, kDim, 5);
  const Episodes a = ClusterEpisodes(x, kN, kDim, 5, 77);
  const Episodes b = ClusterEpisodes(x, kN, kDim, 5, 77);
  EXPECT_EQ(a.assignment, b.assignment);
  EXPECT_EQ(a.centroids, b.centroids);
  EXPECT_EQ(a.medoid, b.medoid);
  EXPECT_EQ(a.inertia, b.inertia);

  // The seed is used: single restarts on unstructured data reach several local optima.
  std::set<double> optima;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    optima.insert(ClusterEpisodes(x, kN, kDim, 5, seed, /*n_init=*/1).inertia);
  }
  EXPECT_GT(optima.size(), 1u);

  // On separated blobs every seed finds the same partition; its centroids are sums in point
  // order, whatever the labels, so the inertia is equal to the bit.
  const Blobs blobs = MakeBlobs(4, 30, 16, 0.05, 8);
  const Episodes ref = ClusterEpisodes(blobs.x, 120, 16, 4, 0);
  for (uint64_t seed = 1; seed < 8; ++seed) {
    const Episodes other = ClusterEpisodes(blobs.x, 120, 16, 4, seed);
    EXPECT_TRUE(SamePartition(ref.assignment, other.assignment)) << "seed " << seed;
    EXPECT_EQ(ref.inertia, other.inertia) << "seed " << seed;
  }
}

TEST(EpisodesCluster, InertiaBounds) {
  constexpr int kN = 60, kDim = 10;
  const std::vector<float> x = RandomUnitRows(kN, kDim, 21);
  const double one = OneClusterInertia(x, kN, kDim);
  EXPECT_NEAR(ClusterEpisodes(x, kN, kDim, 1, 0).inertia, one, 1e-9 * one);
  for (int k : {2, 3, 5, 10}) {
    EXPECT_LE(ClusterEpisodes(x, kN, kDim, k, 4).inertia, one * (1 + 1e-12)) << "k " << k;
  }

  // k = n: every point its own episode, exactly on its centroid.
  const Episodes all = ClusterEpisodes(x, kN, kDim, kN, 9, /*n_init=*/1);
  ASSERT_EQ(all.k, kN);
  EXPECT_EQ(all.inertia, 0.0);
  std::vector<int> sorted = all.assignment;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> identity(kN);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  ExpectLloydFixedPoint(all, x, kN, kDim);
}

TEST(EpisodesCluster, KIsClampedToTheSegments) {
  const std::vector<float> x = RandomUnitRows(3, 4, 2);
  const Episodes three = ClusterEpisodes(x, 3, 4, 8, 0);
  EXPECT_EQ(three.k, 3);
  EXPECT_EQ(three.inertia, 0.0);
  ExpectLloydFixedPoint(three, x, 3, 4);

  const Episodes none = ClusterEpisodes({}, 0, 4, 5, 0);
  EXPECT_EQ(none.k, 0);
  EXPECT_EQ(none.dim, 4);
  EXPECT_TRUE(none.assignment.empty());
  EXPECT_TRUE(none.centroids.empty());
  EXPECT_TRUE(none.medoid.empty());
  EXPECT_EQ(ClusterEpisodes(x, 3, 4, 0, 0).k, 0);
}

TEST(EpisodesCluster, DuplicatePointsStillFillEveryEpisode) {
  // Ten copies of one point, k = 3: seeding falls back to distinct indices and the episodes keep
  // their points (a point moves only to a strictly nearer centroid).
  std::vector<float> same;
  for (int i = 0; i < 10; ++i) same.insert(same.end(), {0.6f, 0.8f});
  const Episodes a = ClusterEpisodes(same, 10, 2, 3, 1);
  ASSERT_EQ(a.k, 3);
  EXPECT_EQ(a.inertia, 0.0);
  ExpectLloydFixedPoint(a, same, 10, 2);

  // Two distinct points, five copies each, k = 4.
  std::vector<float> two;
  for (int i = 0; i < 10; ++i) two.insert(two.end(), {i % 2 ? 1.0f : 0.0f, i % 2 ? 0.0f : 1.0f});
  const Episodes b = ClusterEpisodes(two, 10, 2, 4, 2);
  ASSERT_EQ(b.k, 4);
  EXPECT_EQ(b.inertia, 0.0);
  ExpectLloydFixedPoint(b, two, 10, 2);
}

TEST(EpisodesMedoid, IsTheMemberClosestInCosine) {
  constexpr int kN = 90, kDim = 8;
  const std::vector<float> x = RandomUnitRows(kN, kDim, 31);
  const Episodes ep = ClusterEpisodes(x, kN, kDim, 5, 6);
  ASSERT_EQ(ep.k, 5);
  for (int e = 0; e < ep.k; ++e) {
    // Brute force: every member scored, ranked by cosine descending, ties to the lower index.
    std::vector<std::pair<double, int>> ranked;
    for (int i = 0; i < kN; ++i) {
      if (ep.assignment[i] == e)
        ranked.push_back({-RefCosine(Row(x, i, kDim), ep.centroid(e).data(), kDim), i});
    }
    std::sort(ranked.begin(), ranked.end());
    EXPECT_EQ(ep.medoid[e], ranked[0].second) << "episode " << e;

    const std::vector<int> top3 = MedoidSegments(ep, x, e, 3);
    ASSERT_EQ(top3.size(), std::min<size_t>(3, ranked.size()));
    for (size_t r = 0; r < top3.size(); ++r) EXPECT_EQ(top3[r], ranked[r].second);

    const std::vector<int> every = MedoidSegments(ep, x, e, kN + 5);
    ASSERT_EQ(every.size(), ranked.size());
    for (size_t r = 0; r < every.size(); ++r) EXPECT_EQ(every[r], ranked[r].second);
    EXPECT_TRUE(MedoidSegments(ep, x, e, 0).empty());
  }
}

TEST(EpisodesRoute, MatchesBruteForceCosineArgmax) {
  constexpr int kN = 120, kDim = 16;
  const std::vector<float> x = RandomUnitRows(kN, kDim, 41);
  const Episodes ep = ClusterEpisodes(x, kN, kDim, 7, 3);
  std::mt19937 g(43);
  for (int q = 0; q < 200; ++q) {
    std::vector<float> query(kDim);
    for (auto& v : query) v = static_cast<float>(Normal(g) * (q % 2 ? 3.0 : 1.0));  // any length
    int best = -1;
    double best_cos = -2;
    for (int e = 0; e < ep.k; ++e) {
      const double c = RefCosine(query.data(), ep.centroid(e).data(), kDim);
      if (c > best_cos) {
        best = e;
        best_cos = c;
      }
    }
    EXPECT_EQ(RouteToEpisode(ep, query), best) << "query " << q;
  }
  // A centroid routes to its own episode (cosine 1).
  for (int e = 0; e < ep.k; ++e) EXPECT_EQ(RouteToEpisode(ep, ep.centroid(e)), e);
}

TEST(EpisodesRoute, CosineNotDotTiesToTheLowerIndexNoneWhenEmpty) {
  Episodes ep;
  ep.k = 3;
  ep.dim = 2;
  ep.assignment = {0, 1, 2};
  ep.medoid = {0, 1, 2};
  // Episode 0 is short but aligned with the query, episode 1 long and at 45 degrees: the dot
  // product would pick 1, the cosine (Eq. 7) picks 0. Episode 2 repeats episode 0.
  ep.centroids = {0.1f, 0.0f, 0.9f, 0.9f, 0.1f, 0.0f};
  const std::vector<float> query = {1.0f, 0.0f};
  EXPECT_EQ(RouteToEpisode(ep, query), 0);
  ep.centroids = {0.9f, 0.9f, 0.1f, 0.0f, 0.1f, 0.0f};
  EXPECT_EQ(RouteToEpisode(ep, query), 1);

  Episodes none;
  none.dim = 2;
  EXPECT_EQ(RouteToEpisode(none, query), -1);
}

void ExpectSameBits(const Episodes& a, const Episodes& b) {
  EXPECT_EQ(a.k, b.k);
  EXPECT_EQ(a.dim, b.dim);
  EXPECT_EQ(a.assignment, b.assignment);
  EXPECT_EQ(a.medoid, b.medoid);
  ASSERT_EQ(a.centroids.size(), b.centroids.size());
  for (size_t i = 0; i < a.centroids.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(a.centroids[i]), std::bit_cast<uint32_t>(b.centroids[i]))
        << "centroid value " << i << ": " << a.centroids[i] << " vs " << b.centroids[i];
  }
  EXPECT_EQ(std::bit_cast<uint64_t>(a.inertia), std::bit_cast<uint64_t>(b.inertia));
}

TEST(EpisodesJson, RoundTripIsExact) {
  constexpr int kN = 70, kDim = 24;
  const std::vector<float> x = RandomUnitRows(kN, kDim, 51);
  const Episodes ep = ClusterEpisodes(x, kN, kDim, 6, 8);
  const std::string text = EpisodesToJson(ep).dump();
  const Result<Episodes> back = EpisodesFromJson(Json::parse(text), kDim);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameBits(ep, *back);

  // Awkward floats: the extremes, a denormal, negative zero, values without a short decimal.
  Episodes odd;
  odd.k = 1;
  odd.dim = 8;
  odd.assignment = {0, 0};
  odd.medoid = {1};
  odd.centroids = {FLT_MAX, -FLT_MAX,    FLT_MIN, std::numeric_limits<float>::denorm_min(),
                   -0.0f,   1.0f / 3.0f, 0.1f,    -123456.789f};
  odd.inertia = 1.0 / 3.0;
  const Result<Episodes> odd_back = EpisodesFromJson(Json::parse(EpisodesToJson(odd).dump()), 8);
  ASSERT_TRUE(odd_back.ok()) << odd_back.status().ToString();
  ExpectSameBits(odd, *odd_back);

  Episodes none;
  none.dim = 5;
  const Result<Episodes> none_back = EpisodesFromJson(Json::parse(EpisodesToJson(none).dump()), 5);
  ASSERT_TRUE(none_back.ok()) << none_back.status().ToString();
  ExpectSameBits(none, *none_back);
}

TEST(EpisodesJson, RefusesHostileInput) {
  Episodes ep;
  ep.k = 2;
  ep.dim = 2;
  ep.assignment = {0, 1, 1};
  ep.centroids = {1.0f, 0.0f, 0.0f, 1.0f};
  ep.medoid = {0, 2};
  ep.inertia = 0.5;
  const Json good = EpisodesToJson(ep);
  ASSERT_TRUE(EpisodesFromJson(good, 2).ok());

  struct Case {
    std::string name;
    std::function<void(Json&)> mutate;
    ErrorCode code;
    std::string field;  // the message names it
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<Case> cases = {
      {"not an object",
       [](Json& j) {
         j = Json::array({1, 2});
       },
       ErrorCode::kCorrupt, "episodes"},
      {"missing k", [](Json& j) { j.erase("k"); }, ErrorCode::kCorrupt, "episodes.k"},
      {"missing dim", [](Json& j) { j.erase("dim"); }, ErrorCode::kCorrupt, "episodes.dim"},
      {"missing assignment", [](Json& j) { j.erase("assignment"); }, ErrorCode::kCorrupt,
       "episodes.assignment"},
      {"missing centroids", [](Json& j) { j.erase("centroids"); }, ErrorCode::kCorrupt,
       "episodes.centroids"},
      {"missing medoid", [](Json& j) { j.erase("medoid"); }, ErrorCode::kCorrupt,
       "episodes.medoid"},
      {"missing inertia", [](Json& j) { j.erase("inertia"); }, ErrorCode::kCorrupt,
       "episodes.inertia"},
      {"k a string", [](Json& j) { j["k"] = "2"; }, ErrorCode::kCorrupt, "episodes.k"},
      {"k a float", [](Json& j) { j["k"] = 2.0; }, ErrorCode::kCorrupt, "episodes.k"},
      {"k negative", [](Json& j) { j["k"] = -1; }, ErrorCode::kCorrupt, "episodes.k"},
      {"k huge", [](Json& j) { j["k"] = uint64_t{1} << 40; }, ErrorCode::kCorrupt, "episodes.k"},
      {"k larger than the medoids", [](Json& j) { j["k"] = 3; }, ErrorCode::kCorrupt,
       "episodes.centroids"},
      {"dim of another encoder", [](Json& j) { j["dim"] = 3; }, ErrorCode::kInvalidArgument,
       "episodes.dim"},
      {"dim zero", [](Json& j) { j["dim"] = 0; }, ErrorCode::kCorrupt, "episodes.dim"},
      {"dim null", [](Json& j) { j["dim"] = nullptr; }, ErrorCode::kCorrupt, "episodes.dim"},
      {"assignment an object", [](Json& j) { j["assignment"] = Json::object(); },
       ErrorCode::kCorrupt, "episodes.assignment"},
      {"assignment past k", [](Json& j) { j["assignment"][1] = 2; }, ErrorCode::kCorrupt,
       "episodes.assignment[1]"},
      {"assignment negative", [](Json& j) { j["assignment"][2] = -1; }, ErrorCode::kCorrupt,
       "episodes.assignment[2]"},
      {"assignment a float", [](Json& j) { j["assignment"][0] = 0.5; }, ErrorCode::kCorrupt,
       "episodes.assignment[0]"},
      {"assignment a bool", [](Json& j) { j["assignment"][0] = false; }, ErrorCode::kCorrupt,
       "episodes.assignment[0]"},
      {"no episodes but segments",
       [](Json& j) {
         j["k"] = 0;
         j["centroids"] = Json::array();
         j["medoid"] = Json::array();
       },
       ErrorCode::kCorrupt, "episodes.assignment"},
      {"centroids short", [](Json& j) { j["centroids"].erase(3); }, ErrorCode::kCorrupt,
       "episodes.centroids"},
      {"centroids long", [](Json& j) { j["centroids"].push_back(0.0); }, ErrorCode::kCorrupt,
       "episodes.centroids"},
      {"centroid NaN", [nan](Json& j) { j["centroids"][3] = nan; }, ErrorCode::kCorrupt,
       "episodes.centroids[3]"},
      {"centroid infinite", [inf](Json& j) { j["centroids"][0] = -inf; }, ErrorCode::kCorrupt,
       "episodes.centroids[0]"},
      {"centroid past FLT_MAX", [](Json& j) { j["centroids"][1] = 1e39; }, ErrorCode::kCorrupt,
       "episodes.centroids[1]"},
      {"centroid a string", [](Json& j) { j["centroids"][2] = "0.5"; }, ErrorCode::kCorrupt,
       "episodes.centroids[2]"},
      {"centroid null (NaN as written)", [](Json& j) { j["centroids"][2] = nullptr; },
       ErrorCode::kCorrupt, "episodes.centroids[2]"},
      {"medoid short", [](Json& j) { j["medoid"].erase(1); }, ErrorCode::kCorrupt,
       "episodes.medoid"},
      {"medoid past n", [](Json& j) { j["medoid"][1] = 3; }, ErrorCode::kCorrupt,
       "episodes.medoid[1]"},
      {"medoid of another episode", [](Json& j) { j["medoid"][0] = 1; }, ErrorCode::kCorrupt,
       "episodes.medoid[0]"},
      {"medoid a string", [](Json& j) { j["medoid"] = "0,2"; }, ErrorCode::kCorrupt,
       "episodes.medoid"},
      {"inertia NaN", [nan](Json& j) { j["inertia"] = nan; }, ErrorCode::kCorrupt,
       "episodes.inertia"},
      {"inertia negative", [](Json& j) { j["inertia"] = -1.0; }, ErrorCode::kCorrupt,
       "episodes.inertia"},
      {"inertia a string", [](Json& j) { j["inertia"] = "0.5"; }, ErrorCode::kCorrupt,
       "episodes.inertia"},
  };
  for (const Case& c : cases) {
    Json j = good;
    c.mutate(j);
    const Result<Episodes> r = EpisodesFromJson(j, 2);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.status().code(), c.code) << c.name << ": " << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.field), std::string::npos)
        << c.name << ": " << r.status().ToString();
  }
}

}  // namespace
}  // namespace kvmem::memory
