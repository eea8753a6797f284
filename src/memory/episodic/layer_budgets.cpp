#include "memory/episodic/layer_budgets.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <fstream>
#include <iterator>
#include <numeric>
#include <optional>

#include "engine/forward.h"
#include "kv/kv_pool.h"
#include "memory/store/atomic_file.h"
#include "memory/store/hash.h"
#include "memory/store/json_util.h"

namespace kvmem::memory {
namespace {

using Json = nlohmann::json;

constexpr int kBlockRows = 256;
constexpr int kMaxBatch = 256;
constexpr uint64_t kMaxTextBytes = uint64_t{16} << 20;
constexpr uint64_t kMaxCacheBytes = uint64_t{1} << 20;
constexpr int kCacheVersion = 1;

// Rows [begin, end) of seq (storage index = position: the sequence was filled from 0 in order)
// as one RowRange per pool block, appended to out.
void AppendRowRanges(const kv::KvSequence& seq, int64_t begin, int64_t end,
                     std::vector<model::RowRange>* out) {
  while (begin < end) {
    const int64_t b = begin / kBlockRows;
    const int64_t stop = std::min(end, (b + 1) * kBlockRows);
    out->push_back({seq.blocks()[b], static_cast<int32_t>(begin - b * kBlockRows),
                    static_cast<int32_t>(stop - begin)});
    begin = stop;
  }
}

// The rows before micro-batch start s that token i reads under the mask, sorted by
// (block, first_row) as engine::Batch::visible wants them.
std::vector<model::RowRange> VisibleBefore(const kv::KvSequence& seq, const SensitivityMask& mask,
                                           int64_t i, int64_t s) {
  const int64_t recent = std::min(mask.FirstRecent(i), s);
  const int64_t sinks = i >= mask.n_sink ? std::min(mask.n_sink, s) : 0;
  std::vector<model::RowRange> ranges;
  if (sinks >= recent) {
    AppendRowRanges(seq, 0, s, &ranges);
  } else {
    AppendRowRanges(seq, 0, sinks, &ranges);
    AppendRowRanges(seq, recent, s, &ranges);
  }
  std::sort(ranges.begin(), ranges.end(), [](const model::RowRange& a, const model::RowRange& b) {
    return a.block != b.block ? a.block < b.block : a.first_row < b.first_row;
  });
  return ranges;
}

// One pass over the empty seq in micro-batches of at most max_batch: causal when mask is null,
// else under the mask (see ForwardBlockMasked).
Status RunPass(const model::Model& model, ThreadPool* pool, kv::KvSequence* seq,
               std::span<const int32_t> tokens, const SensitivityMask* mask, int max_batch) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return InvalidArgument("no tokens to profile");
  if (max_batch < 1) return InvalidArgument("max_batch must be at least 1");
  if (seq->n_rows() != 0) return InvalidArgument("the pass needs an empty sequence");
  if (mask != nullptr) KVMEM_RETURN_IF_ERROR(mask->Validate());
  engine::ForwardPass fp(model, pool);
  for (int64_t s = 0; s < n;) {
    int64_t e = std::min(n, s + max_batch);
    // Every token of [s, e) may read the batch's rows before it: all of them must be at or
    // after the token's first recent row (sinks are before s or also recent).
    if (mask != nullptr) {
      while (e - 1 > s && mask->FirstRecent(e - 1) > s) --e;
    }
    engine::Batch b;
    b.tokens.assign(tokens.begin() + s, tokens.begin() + e);
    for (int64_t i = s; i < e; ++i) b.positions.push_back(i);
    if (mask != nullptr && s > 0) {
      // The rows [s, e) are appended in Begin; VisibleBefore names only rows already there.
      for (int64_t i = s; i < e; ++i) b.visible.push_back(VisibleBefore(*seq, *mask, i, s));
    }
    KVMEM_RETURN_IF_ERROR(fp.Begin(b, seq));
    while (!fp.done()) fp.StepLayer();
    s = e;
  }
  return Status::Ok();
}

// Eq. 9 for one layer: mean over rows and KV heads of the cosine of the two passes' keys.
double LayerKeySimilarity(const model::ModelSpec& spec, const kv::KvPool& kv,
                          const kv::KvSequence& full, const kv::KvSequence& block, int layer,
                          int64_t n, ThreadPool* pool) {
  const int heads = spec.n_kv_heads, dk = spec.head_dim_k;
  std::vector<double> per_row(static_cast<size_t>(n));  // (n) sum over heads
  pool->ParallelFor(n, 64, [&](int64_t r0, int64_t r1) {
    std::vector<float> kf(spec.k_dim()), kb(spec.k_dim()), v(spec.v_dim());
    for (int64_t r = r0; r < r1; ++r) {
      const int32_t row = static_cast<int32_t>(r % kBlockRows);
      const size_t blk = static_cast<size_t>(r / kBlockRows);
      kv.ReadToken({full.blocks()[blk], row}, layer, kf.data(), v.data());
      kv.ReadToken({block.blocks()[blk], row}, layer, kb.data(), v.data());
      double sum = 0;
      for (int h = 0; h < heads; ++h) {
        double dot = 0, nf = 0, nb = 0;
        for (int d = h * dk; d < (h + 1) * dk; ++d) {
          dot += double(kf[d]) * kb[d];
          nf += double(kf[d]) * kf[d];
          nb += double(kb[d]) * kb[d];
        }
        if (nf == 0 || nb == 0) {
          sum += (nf == 0 && nb == 0) ? 1.0 : 0.0;
        } else {
          sum += dot / std::sqrt(nf * nb);
        }
      }
      per_row[r] = sum;
    }
  });
  // Summed in row order: the result does not depend on the threads.
  return std::accumulate(per_row.begin(), per_row.end(), 0.0) / (double(n) * heads);
}

// --- Cache ---

std::string CacheName(std::string_view fingerprint) {
  return "layer-sensitivity-" + std::string(fingerprint) + ".json";
}

// What a cached profile was computed from; a file for other inputs is stale.
Json ProfileInputs(const SensitivityCalibration& c, std::span<const int32_t> tokens) {
  return Json{
      {"text", c.text_path},
      {"n_tokens", tokens.size()},
      {"tokens_xxh128", store::Xxh128Hex(std::span(reinterpret_cast<const uint8_t*>(tokens.data()),
                                                   tokens.size_bytes()))},
      {"n_sink", c.mask.n_sink},
      {"block", c.mask.block},
      {"overlap", c.mask.overlap}};
}

// The cached s_l, or nullopt for a missing, unreadable, stale or invalid file.
std::optional<std::vector<double>> ReadCache(const std::string& dir, std::string_view fingerprint,
                                             const Json& inputs, int n_layers) {
  std::vector<uint8_t> bytes;
  if (!store::ReadFileNoFollow(dir, CacheName(fingerprint), kMaxCacheBytes, &bytes).ok()) {
    return std::nullopt;
  }
  auto j = store::ParseUntrustedJson(
      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), 3,
      "layer sensitivity");
  if (!j.ok() || !j->is_object()) return std::nullopt;
  const auto version = j->find("version");
  const auto in = j->find("inputs");
  const auto values = j->find("sensitivity");
  if (version == j->end() || *version != kCacheVersion || in == j->end() || *in != inputs ||
      values == j->end() || !values->is_array() ||
      values->size() != static_cast<size_t>(n_layers)) {
    return std::nullopt;
  }
  std::vector<double> s;
  for (const Json& v : *values) {
    if (!v.is_number()) return std::nullopt;
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < 0.0 || x > 2.0) return std::nullopt;
    s.push_back(x);
  }
  return s;
}

Status WriteCache(const std::string& dir, std::string_view fingerprint, const Json& inputs,
                  std::span<const double> s) {
  // The directory and any missing parents (a presets directory under a store never opened).
  for (size_t slash = dir.find('/', 1); slash != std::string::npos;
       slash = dir.find('/', slash + 1)) {
    KVMEM_RETURN_IF_ERROR(store::MakeDir(dir.substr(0, slash)));
  }
  KVMEM_RETURN_IF_ERROR(store::MakeDir(dir));
  const Json j{{"version", kCacheVersion},
               {"inputs", inputs},
               {"sensitivity", std::vector<double>(s.begin(), s.end())}};
  const std::string text = j.dump(2) + "\n";
  return store::WriteFileAtomic(
      dir, CacheName(fingerprint),
      std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

Result<std::string> ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("calibration text " + path + " cannot be opened");
  std::string text;
  text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  if (f.bad()) return IoError("reading calibration text " + path);
  if (text.size() > kMaxTextBytes) return OutOfRange("calibration text " + path + " too large");
  return text;
}

}  // namespace

int64_t SensitivityMask::FirstRecent(int64_t i) const {
  return std::max<int64_t>(0, (i / block) * block - overlap);
}

bool SensitivityMask::Reads(int64_t i, int64_t j) const {
  return j <= i && (j >= FirstRecent(i) || (i >= n_sink && j < n_sink));
}

Status SensitivityMask::Validate() const {
  if (n_sink < 0 || block < 1 || overlap < 0) {
    return InvalidArgument("sensitivity mask needs n_sink >= 0, block >= 1, overlap >= 0 (got " +
                           std::to_string(n_sink) + ", " + std::to_string(block) + ", " +
                           std::to_string(overlap) + ")");
  }
  return Status::Ok();
}

Status ForwardBlockMasked(const model::Model& model, ThreadPool* pool, kv::KvSequence* seq,
                          std::span<const int32_t> tokens, const SensitivityMask& mask,
                          int max_batch) {
  if (seq->pool()->geometry().block_rows != kBlockRows) {
    return InvalidArgument("the masked pass needs a pool of " + std::to_string(kBlockRows) +
                           "-row blocks");
  }
  return RunPass(model, pool, seq, tokens, &mask, max_batch);
}

Result<std::vector<double>> ProfileKeySimilarity(const model::Model& model, ThreadPool* pool,
                                                 std::span<const int32_t> tokens,
                                                 const SensitivityMask& mask) {
  KVMEM_RETURN_IF_ERROR(mask.Validate());
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return InvalidArgument("no tokens to profile");
  const int64_t blocks = (n + kBlockRows - 1) / kBlockRows;
  kv::KvPool kv(model.kv_geometry(kBlockRows), static_cast<int>(2 * blocks));
  kv::KvSequence full(&kv), block(&kv);
  full.set_window_release(false);  // sliding-window layers are read back too
  block.set_window_release(false);
  KVMEM_RETURN_IF_ERROR(RunPass(model, pool, &full, tokens, nullptr, kMaxBatch));
  KVMEM_RETURN_IF_ERROR(RunPass(model, pool, &block, tokens, &mask, kMaxBatch));
  const model::ModelSpec& spec = model.spec();
  std::vector<double> sigma(static_cast<size_t>(spec.n_layers));
  for (int l = 0; l < spec.n_layers; ++l) {
    sigma[l] = LayerKeySimilarity(spec, kv, full, block, l, n, pool);
  }
  return sigma;
}

std::vector<int64_t> AllocateLayerBudgets(std::span<const double> sensitivity,
                                          std::span<const bool> eligible, double alpha,
                                          int64_t budget_per_layer) {
  assert(sensitivity.size() == eligible.size() && alpha >= 0);
  const size_t n = sensitivity.size();
  std::vector<int64_t> out(n, 0);
  std::vector<size_t> layers;
  for (size_t l = 0; l < n; ++l) {
    if (eligible[l]) layers.push_back(l);
  }
  if (layers.empty() || budget_per_layer < 1) return out;
  const int64_t total = budget_per_layer * static_cast<int64_t>(layers.size());
  std::vector<double> w(n, 0.0);
  double w_sum = 0;
  for (size_t l : layers) {
    const double s = std::isfinite(sensitivity[l]) ? std::max(sensitivity[l], 0.0) : 0.0;
    w[l] = alpha == 0 ? 1.0 : std::pow(s, alpha);
    w_sum += w[l];
  }
  if (!(w_sum > 0) || !std::isfinite(w_sum)) {
    for (size_t l : layers) w[l] = 1.0;
    w_sum = static_cast<double>(layers.size());
  }
  // Largest remainder: floors first, then one more row for the largest fractional parts.
  std::vector<double> frac(n, 0.0);
  int64_t given = 0;
  for (size_t l : layers) {
    const double share = static_cast<double>(total) * (w[l] / w_sum);
    out[l] = static_cast<int64_t>(std::floor(share));
    frac[l] = share - static_cast<double>(out[l]);
    given += out[l];
  }
  std::vector<size_t> order = layers;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return frac[a] > frac[b]; });
  // The floors fall short of the total by the sum of the fractional parts: fewer rows than
  // eligible layers (the modulo only guards against rounding of the shares).
  for (size_t k = 0; given < total; k = (k + 1) % order.size(), ++given) ++out[order[k]];
  assert(given == total);
  // At least one row each, taken from the largest budget.
  for (size_t l : layers) {
    if (out[l] > 0) continue;
    size_t big = layers.front();
    for (size_t m : layers) {
      if (out[m] > out[big]) big = m;
    }
    --out[big];
    out[l] = 1;
  }
  return out;
}

std::string SensitivityCachePath(const std::string& cache_dir, std::string_view fingerprint) {
  return cache_dir + "/" + CacheName(fingerprint);
}

Result<std::vector<double>> LoadOrProfileSensitivity(const model::Model& model, ThreadPool* pool,
                                                     const tokenizer::Tokenizer& tokenizer,
                                                     std::string_view fingerprint,
                                                     const std::string& cache_dir,
                                                     const SensitivityCalibration& calibration) {
  KVMEM_RETURN_IF_ERROR(calibration.mask.Validate());
  if (calibration.n_tokens < 1) return InvalidArgument("n_tokens must be at least 1");
  KVMEM_ASSIGN_OR_RETURN(std::string text, ReadText(calibration.text_path));
  std::vector<int32_t> tokens = tokenizer.Encode(text);
  int64_t n = calibration.n_tokens;
  if (model.spec().n_ctx_train > 0) n = std::min<int64_t>(n, model.spec().n_ctx_train);
  if (static_cast<int64_t>(tokens.size()) > n) tokens.resize(static_cast<size_t>(n));
  if (static_cast<int64_t>(tokens.size()) <= calibration.mask.block) {
    return FailedPrecondition("calibration text " + calibration.text_path + " gives " +
                              std::to_string(tokens.size()) +
                              " tokens, not more than one mask "
                              "block of " +
                              std::to_string(calibration.mask.block));
  }
  const int n_layers = model.spec().n_layers;
  const bool cached = !cache_dir.empty() && !fingerprint.empty();
  const Json inputs = ProfileInputs(calibration, tokens);
  if (cached) {
    if (auto s = ReadCache(cache_dir, fingerprint, inputs, n_layers)) return *s;
  }
  KVMEM_ASSIGN_OR_RETURN(std::vector<double> sigma,
                         ProfileKeySimilarity(model, pool, tokens, calibration.mask));
  std::vector<double> s(sigma.size());
  for (size_t l = 0; l < s.size(); ++l) s[l] = std::clamp(1.0 - sigma[l], 0.0, 2.0);
  if (cached) {
    KVMEM_RETURN_IF_ERROR(
        WriteCache(cache_dir, fingerprint, inputs, s).WithContext("layer sensitivity cache"));
  }
  return s;
}

}  // namespace kvmem::memory
