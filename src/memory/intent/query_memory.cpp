#include "memory/intent/query_memory.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/base64.h"

namespace kvmem::memory {

QueryMemory::QueryMemory(int n_layers, int n_heads, int head_dim, size_t capacity)
    : n_layers_(n_layers), n_heads_(n_heads), head_dim_(head_dim), capacity_(capacity) {}

std::span<const float> QueryMemory::Find(uint64_t session) {
  const auto it = index_.find(session);
  if (it == index_.end()) return {};
  order_.splice(order_.end(), order_, it->second);
  return it->second->second;
}

void QueryMemory::Put(uint64_t session, std::vector<float> m) {
  const auto it = index_.find(session);
  if (it != index_.end()) {
    it->second->second = std::move(m);
    order_.splice(order_.end(), order_, it->second);
    return;
  }
  order_.emplace_back(session, std::move(m));
  index_[session] = std::prev(order_.end());
  while (order_.size() > capacity_) {
    index_.erase(order_.front().first);
    order_.pop_front();
  }
}

std::span<const float> QueryMemory::Update(uint64_t session, std::span<const float> enc,
                                           double lambda) {
  std::vector<float> m(row_size(), 0.0f);
  const std::span<const float> prev = Find(session);
  const double decay = std::exp(-lambda);
  for (size_t i = 0; i < m.size(); ++i) {
    m[i] = static_cast<float>((prev.empty() ? 0.0 : decay * prev[i]) + enc[i]);
  }
  for (size_t r = 0; r < m.size(); r += static_cast<size_t>(head_dim_)) {
    double norm = 0;
    for (int d = 0; d < head_dim_; ++d) norm += double{m[r + d]} * m[r + d];
    norm = std::sqrt(norm);
    if (norm == 0) continue;  // a head whose queries vanish stays zero (uniform scores)
    for (int d = 0; d < head_dim_; ++d) m[r + d] = static_cast<float>(m[r + d] / norm);
  }
  Put(session, std::move(m));
  return Find(session);
}

void QueryMemory::Restore(uint64_t session, std::span<const float> before) {
  if (before.empty()) {
    const auto it = index_.find(session);
    if (it == index_.end()) return;
    order_.erase(it->second);
    index_.erase(it);
    return;
  }
  Put(session, {before.begin(), before.end()});
}

nlohmann::json QueryMemory::ToJson() const {
  nlohmann::json sessions = nlohmann::json::array();
  for (const Entry& e : order_) {
    char key[17];
    std::snprintf(key, sizeof key, "%016llx", static_cast<unsigned long long>(e.first));
    sessions.push_back(
        {{"key", key},
         {"m", Base64Encode(std::string_view(reinterpret_cast<const char*>(e.second.data()),
                                             e.second.size() * sizeof(float)))}});
  }
  return {{"sessions", std::move(sessions)}};
}

Status QueryMemory::FromJson(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("sessions") || !j["sessions"].is_array() ||
      j["sessions"].size() > capacity_) {
    return Corrupt("intentkv state: 'sessions' must be a list of at most " +
                   std::to_string(capacity_) + " query memories");
  }
  order_.clear();
  index_.clear();
  for (const nlohmann::json& s : j["sessions"]) {
    if (!s.is_object() || !s.contains("key") || !s["key"].is_string() || !s.contains("m") ||
        !s["m"].is_string() || s["key"].get<std::string>().size() != 16) {
      return Corrupt("intentkv state: a session needs a 16-digit hex 'key' and 'm'");
    }
    const std::string hex = s["key"].get<std::string>();
    uint64_t key = 0;
    for (char c : hex) {
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return Corrupt("intentkv state: session key '" + hex + "' is not hex");
      key = key << 4 | static_cast<uint64_t>(d);
    }
    KVMEM_ASSIGN_OR_RETURN(std::string bytes,
                           Base64Decode(s["m"].get<std::string>(), "intentkv state: memory"));
    if (bytes.size() != row_size() * sizeof(float)) {
      return Corrupt("intentkv state: a query memory is not (layers, heads, head_dim) floats");
    }
    std::vector<float> m(row_size());
    std::memcpy(m.data(), bytes.data(), bytes.size());
    for (float x : m) {
      if (!std::isfinite(x)) return Corrupt("intentkv state: a query memory is not finite");
    }
    if (index_.count(key) != 0) return Corrupt("intentkv state: session " + hex + " twice");
    Put(key, std::move(m));
  }
  return Status::Ok();
}

std::vector<double> RuleScores(const kv::KvSequence& seq, std::span<const int64_t> candidates,
                               std::span<const float> memory, const model::ModelSpec& spec,
                               ThreadPool* pool) {
  const kv::KvPool& kv = *seq.pool();
  const int n_heads = spec.n_heads, group = spec.n_heads / spec.n_kv_heads;
  const int hd = kv.geometry().head_dim_k;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // Candidate rows as runs inside one block: (block, first_row, n, first candidate index).
  struct Run {
    int32_t block, first_row, n;
    size_t at;
  };
  std::vector<Run> runs;
  for (size_t i = 0; i < candidates.size();) {
    const kv::RowRef r = kv::RowAt(seq, candidates[i]);
    size_t j = i + 1;
    while (j < candidates.size() && candidates[j] == candidates[j - 1] + 1 &&
           kv::RowAt(seq, candidates[j]).block == r.block) {
      ++j;
    }
    runs.push_back({r.block, r.row, static_cast<int32_t>(j - i), i});
    i = j;
  }
  const size_t n = candidates.size();
  std::vector<std::vector<double>> per_layer(static_cast<size_t>(spec.n_layers));
  pool->ParallelFor(spec.n_layers, 1, [&](int64_t l0, int64_t l1) {
    std::vector<kernels::KvSpan> spans(runs.size());
    std::vector<float> w(n);
    for (int64_t l = l0; l < l1; ++l) {
      if (spec.layers[l].sliding_window > 0 || n == 0) continue;
      std::vector<double>& acc = per_layer[l];
      acc.assign(n, 0.0);
      for (int h = 0; h < n_heads; ++h) {
        const int g = h / group;
        for (size_t s = 0; s < runs.size(); ++s) {
          spans[s] = kv.Span(runs[s].block, static_cast<int>(l), g, runs[s].first_row, runs[s].n);
        }
        const float* q = memory.data() + (static_cast<size_t>(l) * n_heads + h) * hd;
        kv.AttentionWeights(q, spans.data(), static_cast<int>(spans.size()), scale, w.data());
        for (size_t i = 0; i < n; ++i) acc[i] += w[i];
      }
    }
  });
  std::vector<double> rule(n, 0.0);
  for (const std::vector<double>& acc : per_layer) {  // layer order: the same on any thread count
    for (size_t i = 0; i < acc.size(); ++i) rule[i] += acc[i];
  }
  return rule;
}

}  // namespace kvmem::memory
