#include "memory/embed/bert_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string_view>

#include "core/fp16.h"
#include "core/utf8.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "memory/store/json_util.h"

namespace kvmem::memory::embed {
namespace {

using store::Json;
using store::StDType;

// fn over [0, n) in chunks of `grain`, on the pool when there is one.
void ForRange(ThreadPool* pool, int64_t n, int64_t grain,
              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (pool == nullptr || pool->size() <= 1) {
    fn(0, n);
  } else {
    pool->ParallelFor(n, grain, fn);
  }
}

Result<int> IntField(const Json& j, const char* key, int64_t lo, int64_t hi) {
  KVMEM_ASSIGN_OR_RETURN(int64_t v, store::JsonInt(j, key, "config", lo, hi));
  return static_cast<int>(v);
}

// An optional string field that must equal `want` when present.
Status ExpectString(const Json& j, const char* key, std::string_view want) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_string()) return Corrupt(std::string("config.") + key + " is not a string");
  if (it->get<std::string>() != want) {
    return Unsupported(std::string("config.") + key + " = " + Quoted(it->get<std::string>()) +
                       " (only " + std::string(want) + ")");
  }
  return Status::Ok();
}

// The tensor `name` as f32, checked to have exactly `shape`.
Result<std::vector<float>> ReadTensor(const store::SafetensorsView& file, const std::string& name,
                                      std::initializer_list<int64_t> shape) {
  const store::StTensor* t = file.Find(name);
  if (t == nullptr) return NotFound("tensor '" + name + "' is missing");
  if (!std::equal(t->shape.begin(), t->shape.end(), shape.begin(), shape.end())) {
    std::string want, got;
    for (int64_t d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
    for (int64_t d : t->shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
    return Corrupt("tensor '" + name + "' has shape [" + got + "], expected [" + want + "]");
  }
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  std::vector<float> out(n);
  const uint8_t* src = t->data.data();
  switch (t->dtype) {
    case StDType::kF32:
      std::memcpy(out.data(), src, n * sizeof(float));
      break;
    case StDType::kF16:
    case StDType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = t->dtype == StDType::kF16 ? F16ToF32(h) : BF16ToF32(h);
      }
      break;
    default:
      return Unsupported("tensor '" + name + "' has dtype " + StDTypeName(t->dtype) +
                         " (F32, F16 or BF16 only)");
  }
  for (float v : out) {
    if (!std::isfinite(v)) return Corrupt("tensor '" + name + "' holds a non-finite value");
  }
  return out;
}

void LayerNormRow(const float* x, const float* g, const float* b, float eps, int n, float* y) {
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += x[i];
  const float mean = static_cast<float>(sum / n);
  double var = 0;
  for (int i = 0; i < n; ++i) var += static_cast<double>(x[i] - mean) * (x[i] - mean);
  const float inv = 1.0f / std::sqrt(static_cast<float>(var / n) + eps);
  for (int i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv * g[i] + b[i];
}

}  // namespace

Result<BertConfig> BertConfig::FromJson(std::string_view json) {
  KVMEM_ASSIGN_OR_RETURN(Json j, store::ParseUntrustedJson(json, 16, "config.json"));
  if (!j.is_object()) return Corrupt("config.json is not a JSON object");
  KVMEM_RETURN_IF_ERROR(ExpectString(j, "model_type", "bert"));
  KVMEM_RETURN_IF_ERROR(ExpectString(j, "hidden_act", "gelu"));
  KVMEM_RETURN_IF_ERROR(ExpectString(j, "position_embedding_type", "absolute"));
  BertConfig c;
  KVMEM_ASSIGN_OR_RETURN(c.vocab_size, IntField(j, "vocab_size", 1, 1 << 22));
  KVMEM_ASSIGN_OR_RETURN(c.hidden, IntField(j, "hidden_size", 1, 1 << 14));
  KVMEM_ASSIGN_OR_RETURN(c.n_layers, IntField(j, "num_hidden_layers", 1, 1024));
  KVMEM_ASSIGN_OR_RETURN(c.n_heads, IntField(j, "num_attention_heads", 1, c.hidden));
  KVMEM_ASSIGN_OR_RETURN(c.intermediate, IntField(j, "intermediate_size", 1, 1 << 16));
  KVMEM_ASSIGN_OR_RETURN(c.max_positions, IntField(j, "max_position_embeddings", 2, 1 << 16));
  KVMEM_ASSIGN_OR_RETURN(c.type_vocab_size, IntField(j, "type_vocab_size", 1, 1 << 10));
  if (c.hidden % c.n_heads != 0) {
    return Corrupt("config: hidden_size " + std::to_string(c.hidden) +
                   " is not a multiple of num_attention_heads " + std::to_string(c.n_heads));
  }
  auto eps = j.find("layer_norm_eps");
  if (eps != j.end()) {
    if (!eps->is_number()) return Corrupt("config.layer_norm_eps is not a number");
    const double e = eps->get<double>();
    if (!(e > 0 && e < 1)) return Corrupt("config.layer_norm_eps is out of range");
    c.layer_norm_eps = static_cast<float>(e);
  }
  return c;
}

Result<BertModel> BertModel::FromSafetensors(const BertConfig& config,
                                             const store::SafetensorsView& file) {
  BertModel m;
  m.config_ = config;
  const int64_t h = config.hidden, inter = config.intermediate;
  const std::string prefix = file.Find("embeddings.word_embeddings.weight") == nullptr &&
                                     file.Find("bert.embeddings.word_embeddings.weight") != nullptr
                                 ? "bert."
                                 : "";
  auto read = [&](const std::string& name, std::initializer_list<int64_t> shape,
                  std::vector<float>* out) -> Status {
    auto t = ReadTensor(file, prefix + name, shape);
    if (!t.ok()) return t.status();
    *out = std::move(t).value();
    return Status::Ok();
  };
  auto read_linear = [&](const std::string& name, int64_t n_out, int64_t n_in,
                         Linear* l) -> Status {
    KVMEM_RETURN_IF_ERROR(read(name + ".weight", {n_out, n_in}, &l->w));
    KVMEM_RETURN_IF_ERROR(read(name + ".bias", {n_out}, &l->b));
    l->n_in = static_cast<int>(n_in);
    l->n_out = static_cast<int>(n_out);
    return Status::Ok();
  };
  auto read_norm = [&](const std::string& name, Norm* n) -> Status {
    KVMEM_RETURN_IF_ERROR(read(name + ".weight", {h}, &n->g));
    return read(name + ".bias", {h}, &n->b);
  };

  KVMEM_RETURN_IF_ERROR(
      read("embeddings.word_embeddings.weight", {config.vocab_size, h}, &m.word_emb_));
  KVMEM_RETURN_IF_ERROR(
      read("embeddings.position_embeddings.weight", {config.max_positions, h}, &m.pos_emb_));
  std::vector<float> types;
  KVMEM_RETURN_IF_ERROR(
      read("embeddings.token_type_embeddings.weight", {config.type_vocab_size, h}, &types));
  m.type0_emb_.assign(types.begin(), types.begin() + h);
  KVMEM_RETURN_IF_ERROR(read_norm("embeddings.LayerNorm", &m.emb_norm_));

  m.layers_.resize(static_cast<size_t>(config.n_layers));
  for (int i = 0; i < config.n_layers; ++i) {
    const std::string p = "encoder.layer." + std::to_string(i) + ".";
    Layer& l = m.layers_[static_cast<size_t>(i)];
    Linear q, k, v;
    KVMEM_RETURN_IF_ERROR(read_linear(p + "attention.self.query", h, h, &q));
    KVMEM_RETURN_IF_ERROR(read_linear(p + "attention.self.key", h, h, &k));
    KVMEM_RETURN_IF_ERROR(read_linear(p + "attention.self.value", h, h, &v));
    l.qkv.n_in = static_cast<int>(h);
    l.qkv.n_out = static_cast<int>(3 * h);
    for (const Linear* part : {&q, &k, &v}) {
      l.qkv.w.insert(l.qkv.w.end(), part->w.begin(), part->w.end());
      l.qkv.b.insert(l.qkv.b.end(), part->b.begin(), part->b.end());
    }
    KVMEM_RETURN_IF_ERROR(read_linear(p + "attention.output.dense", h, h, &l.attn_out));
    KVMEM_RETURN_IF_ERROR(read_norm(p + "attention.output.LayerNorm", &l.attn_norm));
    KVMEM_RETURN_IF_ERROR(read_linear(p + "intermediate.dense", inter, h, &l.ffn_up));
    KVMEM_RETURN_IF_ERROR(read_linear(p + "output.dense", h, inter, &l.ffn_down));
    KVMEM_RETURN_IF_ERROR(read_norm(p + "output.LayerNorm", &l.ffn_norm));
  }
  return m;
}

void BertModel::Apply(const Linear& l, const float* x, int64_t n, float* y, ThreadPool* pool) {
  kernels::WeightMatrix w;
  w.type = DType::kF32;
  w.data = l.w.data();
  w.n_in = l.n_in;
  w.n_out = l.n_out;
  w.row_bytes = static_cast<size_t>(l.n_in) * sizeof(float);
  kernels::MatMul(w, x, n, y, pool);
  ForRange(pool, n, 64, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* row = y + t * l.n_out;
      for (int i = 0; i < l.n_out; ++i) row[i] += l.b[static_cast<size_t>(i)];
    }
  });
}

void BertModel::AddNorm(const Norm& norm, const float* r, float* x, int64_t n,
                        ThreadPool* pool) const {
  const int h = config_.hidden;
  ForRange(pool, n, 64, [&](int64_t t0, int64_t t1) {
    std::vector<float> sum(static_cast<size_t>(h));
    for (int64_t t = t0; t < t1; ++t) {
      float* row = x + t * h;
      for (int i = 0; i < h; ++i) sum[static_cast<size_t>(i)] = row[i] + r[t * h + i];
      LayerNormRow(sum.data(), norm.g.data(), norm.b.data(), config_.layer_norm_eps, h, row);
    }
  });
}

void BertModel::Attention(const float* qkv, std::span<const int> seq_lens, float* ctx,
                          ThreadPool* pool) const {
  const int h = config_.hidden, n_heads = config_.n_heads, hd = config_.head_dim();
  const int64_t stride = 3 * static_cast<int64_t>(h);  // qkv row: (3, n_heads, head_dim)
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<int64_t> starts(seq_lens.size() + 1, 0);
  for (size_t s = 0; s < seq_lens.size(); ++s) starts[s + 1] = starts[s] + seq_lens[s];
  const kernels::OpsTable& ops = kernels::Ops();
  // One task per (sequence, head).
  const int64_t n_tasks = static_cast<int64_t>(seq_lens.size()) * n_heads;
  ForRange(pool, n_tasks, 1, [&](int64_t task0, int64_t task1) {
    std::vector<float> scores;
    for (int64_t task = task0; task < task1; ++task) {
      const size_t s = static_cast<size_t>(task / n_heads);
      const int head = static_cast<int>(task % n_heads);
      const int64_t t0 = starts[s], len = seq_lens[s];
      scores.resize(static_cast<size_t>(len));
      for (int64_t i = 0; i < len; ++i) {
        const float* q = qkv + (t0 + i) * stride + head * hd;
        for (int64_t j = 0; j < len; ++j) {
          const float* k = qkv + (t0 + j) * stride + h + head * hd;
          scores[static_cast<size_t>(j)] = ops.dot(q, k, hd) * scale;
        }
        ops.softmax(scores.data(), len);
        float* out = ctx + (t0 + i) * h + head * hd;
        std::fill(out, out + hd, 0.0f);
        for (int64_t j = 0; j < len; ++j) {
          ops.axpy(scores[static_cast<size_t>(j)], qkv + (t0 + j) * stride + 2 * h + head * hd, out,
                   hd);
        }
      }
    }
  });
}

void BertModel::Forward(std::span<const int32_t> ids, std::span<const int> seq_lens, float* out,
                        ThreadPool* pool) const {
  const int64_t n = static_cast<int64_t>(ids.size());
  const int h = config_.hidden, inter = config_.intermediate;
  // Embeddings: word + position (within the sequence) + token type 0, then LayerNorm.
  std::vector<int> pos(ids.size());
  for (size_t s = 0, t = 0; s < seq_lens.size(); ++s) {
    for (int p = 0; p < seq_lens[s]; ++p) pos[t++] = p;
  }
  ForRange(pool, n, 64, [&](int64_t t0, int64_t t1) {
    std::vector<float> e(static_cast<size_t>(h));
    for (int64_t t = t0; t < t1; ++t) {
      const float* w = word_emb_.data() + static_cast<int64_t>(ids[t]) * h;
      const float* p = pos_emb_.data() + static_cast<int64_t>(pos[t]) * h;
      for (int i = 0; i < h; ++i) e[static_cast<size_t>(i)] = w[i] + p[i] + type0_emb_[i];
      LayerNormRow(e.data(), emb_norm_.g.data(), emb_norm_.b.data(), config_.layer_norm_eps, h,
                   out + t * h);
    }
  });

  std::vector<float> qkv(static_cast<size_t>(n) * 3 * h);  // (n, 3 * hidden)
  std::vector<float> ctx(static_cast<size_t>(n) * h);      // (n, hidden)
  std::vector<float> proj(static_cast<size_t>(n) * h);     // (n, hidden)
  std::vector<float> ffn(static_cast<size_t>(n) * inter);  // (n, intermediate)
  for (const Layer& l : layers_) {
    Apply(l.qkv, out, n, qkv.data(), pool);
    Attention(qkv.data(), seq_lens, ctx.data(), pool);
    Apply(l.attn_out, ctx.data(), n, proj.data(), pool);
    AddNorm(l.attn_norm, proj.data(), out, n, pool);
    Apply(l.ffn_up, out, n, ffn.data(), pool);
    ForRange(pool, n, 16, [&](int64_t t0, int64_t t1) {
      // Exact GELU (torch.nn.GELU(), "gelu" in Hugging Face configs).
      for (int64_t i = t0 * inter; i < t1 * inter; ++i) {
        const float a = ffn[static_cast<size_t>(i)];
        ffn[static_cast<size_t>(i)] = 0.5f * a * (1.0f + std::erf(a * 0.70710678118654752f));
      }
    });
    Apply(l.ffn_down, ffn.data(), n, proj.data(), pool);
    AddNorm(l.ffn_norm, proj.data(), out, n, pool);
  }
}

}  // namespace kvmem::memory::embed
