// KeepMemory's stored form: one sequence of rows (the prefix, then every cache), their tokens, and
// a state naming the caches. Restore trusts nothing in the state: every index and range is
// checked against the rows, and each cache's tokens against its segments'.
#include <algorithm>
#include <cstring>

#include "core/base64.h"
#include "memory/segments/keep_memory.h"
#include "memory/segments/segment_rows.h"

namespace kvmem::memory::segments {
namespace {

using Json = nlohmann::json;

std::string FloatsToBase64(const std::vector<float>& v) {
  return Base64Encode(
      std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
}

Result<std::vector<float>> FloatsFromBase64(const Json& j, std::string_view what) {
  if (!j.is_string()) return Corrupt(std::string(what) + " is not a string");
  KVMEM_ASSIGN_OR_RETURN(std::string bytes, Base64Decode(j.get<std::string>(), what));
  if (bytes.size() % sizeof(float) != 0) return Corrupt(std::string(what) + " has a partial float");
  std::vector<float> v(bytes.size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

Result<int64_t> IntField(const Json& j, const char* key, int64_t lo, int64_t hi) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number_integer()) {
    return Corrupt(std::string("KEEP state: '") + key + "' missing or not an integer");
  }
  const int64_t v = j[key].get<int64_t>();
  if (v < lo || v > hi) {
    return Corrupt(std::string("KEEP state: '") + key + "' = " + std::to_string(v) + " outside [" +
                   std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v;
}

}  // namespace

Result<KeepMemory::Persisted> KeepMemory::Persist() const {
  Persisted out;
  if (!prefix_rows_) return FailedPrecondition("KEEP memory has no prefix yet (SetPrefix)");
  out.rows = std::make_unique<kv::KvSequence>(pool_);
  out.rows->set_window_release(false);
  const auto prefix_len = static_cast<int64_t>(prefix_tokens_.size());
  KVMEM_RETURN_IF_ERROR(AppendPlaced(model_, *prefix_rows_, 0, prefix_len, out.rows.get(), 0));
  out.tokens = prefix_tokens_;
  Json units = Json::array();
  // Copies a cache's rows at the positions they were computed at (the prefix's end).
  auto add = [&](const Cache& c, std::span<const int32_t> tokens) -> Result<int> {
    const auto n = static_cast<int64_t>(tokens.size());
    const int64_t first = out.rows->n_rows();
    KVMEM_RETURN_IF_ERROR(
        AppendPlaced(model_, *c.rows, c.first_row, n, out.rows.get(), prefix_len));
    out.tokens.insert(out.tokens.end(), tokens.begin(), tokens.end());
    units.push_back({{"first_row", first}, {"rows", n}});
    return static_cast<int>(units.size()) - 1;
  };
  Json groups = Json::array();
  for (const Group& g : groups_) {
    Json j = {{"centroid", FloatsToBase64(g.centroid)}, {"static", g.is_static}, {"unit", -1}};
    if (g.is_static && g.cache) {
      std::vector<int32_t> tokens;
      for (int m : g.members) {
        const auto& t = segments_[static_cast<size_t>(m)].tokens;
        tokens.insert(tokens.end(), t.begin(), t.end());
      }
      KVMEM_ASSIGN_OR_RETURN(j["unit"], add(*g.cache, tokens));
      j["members"] = g.members;
    }
    groups.push_back(std::move(j));
  }
  Json segs = Json::array();
  for (const Segment& s : segments_) {
    Json j = {{"name", s.name},
              {"text", s.text},
              {"tokens", s.tokens},
              {"changed", s.changed_step},
              {"group", s.group},
              {"unit", -1},
              {"embedding", FloatsToBase64(s.embedding)}};
    if (s.cache) {
      KVMEM_ASSIGN_OR_RETURN(j["unit"], add(*s.cache, s.tokens));
    }
    segs.push_back(std::move(j));
  }
  out.state = {{"version", 1},   {"prefix", prefix_len}, {"step", step_},   {"grouped", grouped_},
               {"units", units}, {"groups", groups},     {"segments", segs}};
  return out;
}

Result<std::unique_ptr<KeepMemory>> KeepMemory::Restore(
    const model::Model& model, ThreadPool* threads, kv::KvPool* pool, KeepConfig config,
    std::unique_ptr<kv::KvSequence> rows, std::span<const int32_t> tokens, const Json& state) {
  if (!rows || rows->n_rows() != static_cast<int64_t>(tokens.size())) {
    return Corrupt("KEEP state: rows and tokens differ in number");
  }
  if (!state.is_object() || state.value("version", 0) != 1) {
    return Corrupt("KEEP state: not a version-1 KEEP memory");
  }
  const int64_t n_rows = rows->n_rows();
  KVMEM_ASSIGN_OR_RETURN(int64_t prefix_len, IntField(state, "prefix", 1, n_rows));
  auto m = std::make_unique<KeepMemory>(model, threads, pool, config);
  KVMEM_ASSIGN_OR_RETURN(m->step_, IntField(state, "step", 0, int64_t{1} << 40));
  m->grouped_ = state.value("grouped", false);
  // The stored rows are the packed caches from here on (the prefix's rows among them are dead,
  // and go at the next compaction).
  std::shared_ptr<kv::KvSequence> shared(std::move(rows));
  shared->set_window_release(false);
  m->packed_ = shared;
  m->prefix_tokens_.assign(tokens.begin(), tokens.begin() + prefix_len);
  m->prefix_rows_ = std::make_unique<kv::KvSequence>(pool);
  m->prefix_rows_->set_window_release(false);
  KVMEM_RETURN_IF_ERROR(AppendPlaced(model, *shared, 0, prefix_len, m->prefix_rows_.get(), 0));

  const Json& units = state.value("units", Json::array());
  const Json& groups = state.value("groups", Json::array());
  const Json& segs = state.value("segments", Json::array());
  if (!units.is_array() || !groups.is_array() || !segs.is_array()) {
    return Corrupt("KEEP state: units, groups and segments must be arrays");
  }
  // A unit's cache, checked to spell `want`.
  auto unit = [&](const Json& j, std::span<const int32_t> want) -> Result<std::shared_ptr<Cache>> {
    KVMEM_ASSIGN_OR_RETURN(int64_t u,
                           IntField(j, "unit", 0, static_cast<int64_t>(units.size()) - 1));
    KVMEM_ASSIGN_OR_RETURN(int64_t first, IntField(units[u], "first_row", prefix_len, n_rows));
    KVMEM_ASSIGN_OR_RETURN(int64_t n, IntField(units[u], "rows", 0, n_rows - first));
    if (n != static_cast<int64_t>(want.size()) ||
        !std::equal(want.begin(), want.end(), tokens.begin() + first)) {
      return Corrupt("KEEP state: unit " + std::to_string(u) + " does not hold its tokens");
    }
    auto c = std::make_shared<Cache>();
    c->rows = shared;
    c->first_row = first;
    return c;
  };
  for (const Json& j : segs) {
    Segment s;
    if (!j.is_object() || !j.value("name", Json()).is_string() ||
        !j.value("text", Json()).is_string() || !j.value("tokens", Json()).is_array()) {
      return Corrupt("KEEP state: a segment needs a name, a text and tokens");
    }
    s.name = j["name"].get<std::string>();
    s.text = j["text"].get<std::string>();
    for (const Json& t : j["tokens"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
          t.get<int64_t>() >= model.spec().n_vocab) {
        return Corrupt("KEEP state: segment '" + s.name + "' has a token outside the vocabulary");
      }
      s.tokens.push_back(t.get<int32_t>());
    }
    if (s.tokens.empty()) return Corrupt("KEEP state: segment '" + s.name + "' has no tokens");
    KVMEM_ASSIGN_OR_RETURN(s.changed_step, IntField(j, "changed", 0, m->step_));
    KVMEM_ASSIGN_OR_RETURN(int64_t g,
                           IntField(j, "group", -1, static_cast<int64_t>(groups.size()) - 1));
    s.group = static_cast<int>(g);
    KVMEM_ASSIGN_OR_RETURN(s.embedding,
                           FloatsFromBase64(j.value("embedding", Json()), "embedding"));
    if (j.value("unit", -1) != -1) {
      KVMEM_ASSIGN_OR_RETURN(s.cache, unit(j, s.tokens));
    }
    if (m->Index(s.name) >= 0) return Corrupt("KEEP state: segment '" + s.name + "' twice");
    m->segments_.push_back(std::move(s));
  }
  for (const Json& j : groups) {
    Group g;
    if (!j.is_object()) return Corrupt("KEEP state: a group is not an object");
    KVMEM_ASSIGN_OR_RETURN(g.centroid, FloatsFromBase64(j.value("centroid", Json()), "centroid"));
    if (j.value("unit", -1) != -1) {
      const Json& members = j.value("members", Json::array());
      std::vector<int32_t> want;
      for (const Json& mj : members) {
        if (!mj.is_number_integer() || mj.get<int64_t>() < 0 ||
            mj.get<int64_t>() >= static_cast<int64_t>(m->segments_.size()) ||
            (!g.members.empty() && mj.get<int>() <= g.members.back())) {
          return Corrupt("KEEP state: a static group's members are not ascending segments");
        }
        const Segment& s = m->segments_[mj.get<size_t>()];
        if (s.group != static_cast<int>(m->groups_.size())) {
          return Corrupt("KEEP state: a static group lists a segment of another group");
        }
        g.members.push_back(mj.get<int>());
        want.insert(want.end(), s.tokens.begin(), s.tokens.end());
      }
      KVMEM_ASSIGN_OR_RETURN(g.cache, unit(j, want));
      g.is_static = true;
    }
    m->groups_.push_back(std::move(g));
  }
  // Every segment can be placed: a cache of its own or a static group's that lists it.
  for (size_t i = 0; i < m->segments_.size(); ++i) {
    const Segment& s = m->segments_[i];
    if (s.cache) continue;
    const bool in_static = s.group >= 0 && m->groups_[static_cast<size_t>(s.group)].is_static &&
                           std::count(m->groups_[s.group].members.begin(),
                                      m->groups_[s.group].members.end(), static_cast<int>(i)) == 1;
    if (!in_static) return Corrupt("KEEP state: segment '" + s.name + "' has no cache");
  }
  return m;
}

}  // namespace kvmem::memory::segments
