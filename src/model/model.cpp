#include "model/model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "core/fp16.h"
#include "core/hash.h"
#include "kernels/type_traits.h"
#include "model/architecture.h"
#include "model/math_keys.h"
#include "model/rope_scaling.h"

namespace kvmem::model {

using gguf::Key;

float ModelSpec::attn_scale() const {
  const float d =
      query_pre_attn_scalar > 0.0f ? query_pre_attn_scalar : static_cast<float>(head_dim_k);
  return 1.0f / std::sqrt(d);
}

int64_t ModelSpec::ffn_params_per_token() const {
  const int64_t d = n_embd;
  if (n_expert == 0) return 3 * d * n_ff;
  return d * n_expert + int64_t{n_expert_used} * 3 * d * n_ff_exp;
}

const char* ArchName(Arch arch) {
  switch (arch) {
    case Arch::kLlama:
      return "llama";
    case Arch::kQwen2:
      return "qwen2";
    case Arch::kQwen3:
      return "qwen3";
    case Arch::kQwen3Moe:
      return "qwen3moe";
    case Arch::kGemma3:
      return "gemma3";
    case Arch::kGptOss:
      return "gpt-oss";
  }
  return "unknown";
}

std::span<const Architecture* const> SupportedArchitectures() {
  static const Architecture* const kAll[] = {&LlamaArchitecture(),  &Qwen2Architecture(),
                                             &Qwen3Architecture(),  &Qwen3MoeArchitecture(),
                                             &Gemma3Architecture(), &GptOssArchitecture()};
  return kAll;
}

// Reads tensors with shape checks; every failure names the tensor.
class ModelLoader {
 public:
  explicit ModelLoader(const gguf::GgufFile& f) : f_(f) {}

  Status ReadSpec(const Architecture& a, ModelSpec* s);
  Status ReadWeights(const Architecture& a, const ModelSpec& s, ModelWeights* w, size_t* bytes);

 private:
  Result<kernels::WeightMatrix> Matrix(const std::string& name, int64_t n_in, int64_t n_out);
  // The n_expert matrices (n_out, n_in) of a 3-D expert tensor [n_in, n_out, n_expert].
  Result<std::vector<kernels::WeightMatrix>> Experts(const std::string& name, int64_t n_in,
                                                     int64_t n_out, int64_t n_expert);
  Result<std::vector<float>> Vector(const std::string& name, int64_t n);
  Result<int> PositiveInt(Key key, int64_t max, std::optional<int64_t> fallback = std::nullopt);

  const gguf::GgufFile& f_;
  size_t bytes_ = 0;

 public:
  std::set<std::string> consumed;  // tensors read (math_keys.h refuses the others)
};

Result<int> ModelLoader::PositiveInt(Key key, int64_t max, std::optional<int64_t> fallback) {
  Result<int64_t> v = fallback ? f_.GetIntOr(key, *fallback) : f_.GetInt(key);
  if (!v.ok()) return v.status();
  if (*v <= 0 || *v > max) {
    return Corrupt("metadata '" + f_.Name(key) + "' = " + std::to_string(*v) + " is outside [1, " +
                   std::to_string(max) + "]");
  }
  return static_cast<int>(*v);
}

Status ModelLoader::ReadSpec(const Architecture& a, ModelSpec* s) {
  s->arch = a.arch;
  s->arch_name = std::string(a.gguf_name);
  Result<std::string_view> name = f_.GetStringOr(Key::kGeneralName, "");
  if (name.ok()) s->name = std::string(*name);
  KVMEM_ASSIGN_OR_RETURN(s->n_layers, PositiveInt(Key::kBlockCount, 1024));
  KVMEM_ASSIGN_OR_RETURN(s->n_embd, PositiveInt(Key::kEmbeddingLength, 1 << 16));
  KVMEM_ASSIGN_OR_RETURN(s->n_heads, PositiveInt(Key::kHeadCount, 1024));
  KVMEM_ASSIGN_OR_RETURN(s->n_kv_heads, PositiveInt(Key::kHeadCountKv, 1024, s->n_heads));
  KVMEM_ASSIGN_OR_RETURN(s->n_ff, PositiveInt(Key::kFeedForwardLength, 1 << 18));
  KVMEM_ASSIGN_OR_RETURN(s->n_ctx_train, PositiveInt(Key::kContextLength, 1 << 24, 4096));
  if (s->n_heads % s->n_kv_heads != 0) {
    return Corrupt("head_count " + std::to_string(s->n_heads) +
                   " is not a multiple of head_count_kv " + std::to_string(s->n_kv_heads));
  }
  if (!f_.Has(Key::kKeyLength) && s->n_embd % s->n_heads != 0) {
    return Corrupt("embedding_length is not a multiple of head_count and key_length is absent");
  }
  KVMEM_ASSIGN_OR_RETURN(s->head_dim_k, PositiveInt(Key::kKeyLength, 1024, s->n_embd / s->n_heads));
  KVMEM_ASSIGN_OR_RETURN(s->head_dim_v, PositiveInt(Key::kValueLength, 1024, s->head_dim_k));
  if (s->head_dim_v != s->head_dim_k) {
    return Unsupported("value_length " + std::to_string(s->head_dim_v) + " != key_length " +
                       std::to_string(s->head_dim_k));
  }
  KVMEM_ASSIGN_OR_RETURN(s->rope_dim, PositiveInt(Key::kRopeDimensionCount, 1024, s->head_dim_k));
  if (s->rope_dim > s->head_dim_k || s->rope_dim % 2 != 0) {
    return Corrupt("rope.dimension_count " + std::to_string(s->rope_dim) +
                   " must be even and <= the head size " + std::to_string(s->head_dim_k));
  }
  KVMEM_ASSIGN_OR_RETURN(s->rope_freq_base, f_.GetFloatOr(Key::kRopeFreqBase, 10000.0f));
  KVMEM_ASSIGN_OR_RETURN(s->rms_eps, f_.GetFloat(Key::kLayerNormRmsEps));
  if (!(s->rope_freq_base > 1.0f) || !std::isfinite(s->rope_freq_base)) {
    return Corrupt("rope.freq_base must be a finite number > 1");
  }
  if (!(s->rms_eps > 0.0f) || !(s->rms_eps < 1.0f)) {
    return Corrupt("attention.layer_norm_rms_epsilon must be in (0, 1)");
  }
  if (a.moe) {
    KVMEM_ASSIGN_OR_RETURN(s->n_expert, PositiveInt(Key::kExpertCount, 4096));
    KVMEM_ASSIGN_OR_RETURN(s->n_expert_used, PositiveInt(Key::kExpertUsedCount, s->n_expert));
    KVMEM_ASSIGN_OR_RETURN(s->n_ff_exp, PositiveInt(Key::kExpertFeedForwardLength, 1 << 18,
                                                    s->n_ff / s->n_expert_used));
    s->expert_gating = a.expert_gating;
  }
  s->attn_out_bias = a.attn_out_bias;
  s->moe_bias = a.moe_bias;
  s->attn_sinks = a.attn_sinks;
  s->rope_mode = a.rope_mode;
  s->qkv_bias = a.qkv_bias;
  s->qk_norm = a.qk_norm;
  s->post_norms = a.post_norms;
  s->ffn_act = a.ffn_act;
  LayerSpec global;
  global.rope_freq_base = s->rope_freq_base;
  s->layers.assign(s->n_layers, global);
  if (a.read_hparams != nullptr) KVMEM_RETURN_IF_ERROR(a.read_hparams(f_, s));
  KVMEM_RETURN_IF_ERROR(ReadRopeScaling(f_, a.scale_local_layers, s));
  const gguf::TensorInfo* embd = f_.FindTensor("token_embd.weight");
  if (embd == nullptr) return NotFound("tensor 'token_embd.weight' is missing");
  if (embd->n_dims != 2 || embd->dims[0] != s->n_embd) {
    return Corrupt("tensor 'token_embd.weight' must be (n_vocab, " + std::to_string(s->n_embd) +
                   ")");
  }
  s->n_vocab = static_cast<int>(embd->dims[1]);
  s->tied_output = f_.FindTensor("output.weight") == nullptr;
  if (a.rope_freqs && f_.FindTensor("rope_freqs.weight") != nullptr) {
    KVMEM_ASSIGN_OR_RETURN(s->rope_freq_factors, Vector("rope_freqs.weight", s->rope_dim / 2));
    for (float ff : s->rope_freq_factors) {
      if (!(ff > 0.0f) || !std::isfinite(ff)) {
        return Corrupt("tensor 'rope_freqs.weight' holds a factor that is not a finite number > 0");
      }
    }
  }
  return Status::Ok();
}

namespace {

std::string ShapeText(std::span<const int64_t> dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace

Result<kernels::WeightMatrix> ModelLoader::Matrix(const std::string& name, int64_t n_in,
                                                  int64_t n_out) {
  KVMEM_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, f_.GetTensor(name));
  if (t->n_dims != 2 || t->dims[0] != n_in || t->dims[1] != n_out) {
    return Corrupt("tensor '" + name + "' has shape " +
                   ShapeText({t->dims, static_cast<size_t>(t->n_dims)}) + ", expected " +
                   ShapeText(std::vector<int64_t>{n_in, n_out}));
  }
  if (kernels::GetTypeTraits(t->type) == nullptr ||
      kernels::GetTypeTraits(t->type)->vec_dot == nullptr) {
    return Unsupported("tensor '" + name + "' has type " + DTypeName(t->type) +
                       ", which kvmem cannot multiply");
  }
  kernels::WeightMatrix m;
  m.type = t->type;
  m.data = t->data;
  m.n_in = n_in;
  m.n_out = n_out;
  m.row_bytes = static_cast<size_t>(t->n_bytes / n_out);
  bytes_ += t->n_bytes;
  consumed.insert(name);
  return m;
}

Result<std::vector<kernels::WeightMatrix>> ModelLoader::Experts(const std::string& name,
                                                                int64_t n_in, int64_t n_out,
                                                                int64_t n_expert) {
  KVMEM_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, f_.GetTensor(name));
  if (t->n_dims != 3 || t->dims[0] != n_in || t->dims[1] != n_out || t->dims[2] != n_expert) {
    return Corrupt("tensor '" + name + "' has shape " +
                   ShapeText({t->dims, static_cast<size_t>(t->n_dims)}) + ", expected " +
                   ShapeText(std::vector<int64_t>{n_in, n_out, n_expert}));
  }
  if (kernels::GetTypeTraits(t->type) == nullptr ||
      kernels::GetTypeTraits(t->type)->vec_dot == nullptr) {
    return Unsupported("tensor '" + name + "' has type " + DTypeName(t->type) +
                       ", which kvmem cannot multiply");
  }
  const size_t expert_bytes = static_cast<size_t>(t->n_bytes / n_expert);
  std::vector<kernels::WeightMatrix> experts(n_expert);
  for (int64_t e = 0; e < n_expert; ++e) {
    kernels::WeightMatrix& m = experts[e];
    m.type = t->type;
    m.data = static_cast<const uint8_t*>(t->data) + e * expert_bytes;
    m.n_in = n_in;
    m.n_out = n_out;
    m.row_bytes = expert_bytes / n_out;
  }
  bytes_ += t->n_bytes;
  consumed.insert(name);
  return experts;
}

Result<std::vector<float>> ModelLoader::Vector(const std::string& name, int64_t n) {
  KVMEM_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, f_.GetTensor(name));
  if (t->n_elements != n) {
    return Corrupt("tensor '" + name + "' has " + std::to_string(t->n_elements) +
                   " elements, expected " + std::to_string(n));
  }
  const kernels::TypeTraits* tt = kernels::GetTypeTraits(t->type);
  if (tt == nullptr || tt->to_float == nullptr) {
    return Unsupported("tensor '" + name + "' has unsupported type " + DTypeName(t->type));
  }
  std::vector<float> v(n);
  tt->to_float(t->data, v.data(), n);
  bytes_ += t->n_bytes;
  consumed.insert(name);
  return v;
}

Status ModelLoader::ReadWeights(const Architecture& a, const ModelSpec& s, ModelWeights* w,
                                size_t* bytes) {
  KVMEM_ASSIGN_OR_RETURN(w->tok_embd, Matrix("token_embd.weight", s.n_embd, s.n_vocab));
  KVMEM_ASSIGN_OR_RETURN(w->output_norm, Vector("output_norm.weight", s.n_embd));
  if (s.tied_output) {
    w->output = w->tok_embd;
  } else {
    KVMEM_ASSIGN_OR_RETURN(w->output, Matrix("output.weight", s.n_embd, s.n_vocab));
  }
  w->layers.resize(s.n_layers);
  for (int i = 0; i < s.n_layers; ++i) {
    LayerWeights& l = w->layers[i];
    const std::string p = "blk." + std::to_string(i) + ".";
    KVMEM_ASSIGN_OR_RETURN(l.attn_norm, Vector(p + "attn_norm.weight", s.n_embd));
    if (a.attn_out_bias) {
      KVMEM_ASSIGN_OR_RETURN(l.bo, Vector(p + "attn_output.bias", s.n_embd));
    }
    if (a.attn_sinks) {
      KVMEM_ASSIGN_OR_RETURN(l.attn_sinks, Vector(p + "attn_sinks.weight", s.n_heads));
    }
    KVMEM_ASSIGN_OR_RETURN(l.wq, Matrix(p + "attn_q.weight", s.n_embd, s.q_dim()));
    KVMEM_ASSIGN_OR_RETURN(l.wk, Matrix(p + "attn_k.weight", s.n_embd, s.k_dim()));
    KVMEM_ASSIGN_OR_RETURN(l.wv, Matrix(p + "attn_v.weight", s.n_embd, s.v_dim()));
    KVMEM_ASSIGN_OR_RETURN(l.wo,
                           Matrix(p + "attn_output.weight", s.n_heads * s.head_dim_v, s.n_embd));
    if (a.qkv_bias) {
      KVMEM_ASSIGN_OR_RETURN(l.bq, Vector(p + "attn_q.bias", s.q_dim()));
      KVMEM_ASSIGN_OR_RETURN(l.bk, Vector(p + "attn_k.bias", s.k_dim()));
      KVMEM_ASSIGN_OR_RETURN(l.bv, Vector(p + "attn_v.bias", s.v_dim()));
    }
    if (a.qk_norm) {
      KVMEM_ASSIGN_OR_RETURN(l.q_norm, Vector(p + "attn_q_norm.weight", s.head_dim_k));
      KVMEM_ASSIGN_OR_RETURN(l.k_norm, Vector(p + "attn_k_norm.weight", s.head_dim_k));
    }
    KVMEM_ASSIGN_OR_RETURN(l.ffn_norm, Vector(p + std::string(a.ffn_norm) + ".weight", s.n_embd));
    if (a.post_norms) {
      KVMEM_ASSIGN_OR_RETURN(l.attn_post_norm, Vector(p + "post_attention_norm.weight", s.n_embd));
      KVMEM_ASSIGN_OR_RETURN(l.ffn_post_norm, Vector(p + "post_ffw_norm.weight", s.n_embd));
    }
    if (a.moe) {
      const int ne = s.n_expert, nf = s.n_ff_exp;
      KVMEM_ASSIGN_OR_RETURN(l.router, Matrix(p + "ffn_gate_inp.weight", s.n_embd, ne));
      KVMEM_ASSIGN_OR_RETURN(l.exp_gate, Experts(p + "ffn_gate_exps.weight", s.n_embd, nf, ne));
      KVMEM_ASSIGN_OR_RETURN(l.exp_up, Experts(p + "ffn_up_exps.weight", s.n_embd, nf, ne));
      KVMEM_ASSIGN_OR_RETURN(l.exp_down, Experts(p + "ffn_down_exps.weight", nf, s.n_embd, ne));
      if (a.moe_bias) {
        KVMEM_ASSIGN_OR_RETURN(l.router_bias, Vector(p + "ffn_gate_inp.bias", ne));
        KVMEM_ASSIGN_OR_RETURN(l.exp_gate_bias, Vector(p + "ffn_gate_exps.bias", int64_t{ne} * nf));
        KVMEM_ASSIGN_OR_RETURN(l.exp_up_bias, Vector(p + "ffn_up_exps.bias", int64_t{ne} * nf));
        KVMEM_ASSIGN_OR_RETURN(l.exp_down_bias,
                               Vector(p + "ffn_down_exps.bias", int64_t{ne} * s.n_embd));
      }
      continue;
    }
    KVMEM_ASSIGN_OR_RETURN(l.w_gate, Matrix(p + "ffn_gate.weight", s.n_embd, s.n_ff));
    KVMEM_ASSIGN_OR_RETURN(l.w_up, Matrix(p + "ffn_up.weight", s.n_embd, s.n_ff));
    KVMEM_ASSIGN_OR_RETURN(l.w_down, Matrix(p + "ffn_down.weight", s.n_ff, s.n_embd));
  }
  *bytes = bytes_;
  return Status::Ok();
}

Result<std::unique_ptr<Model>> Model::Load(const std::string& path) {
  KVMEM_ASSIGN_OR_RETURN(gguf::GgufFile file, gguf::GgufFile::Open(path));
  std::unique_ptr<Model> m(new Model());
  m->file_ = std::make_unique<gguf::GgufFile>(std::move(file));
  const gguf::GgufFile& f = *m->file_;
  const Architecture* arch = nullptr;
  for (const Architecture* a : SupportedArchitectures()) {
    if (a->gguf_name == f.architecture()) arch = a;
  }
  if (f.architecture() == "clip") {
    return Unsupported("'" + path +
                       "' is a vision projector (mmproj) file, not a language model: pass the "
                       "model's own GGUF");
  }
  if (arch == nullptr) {
    return Unsupported("'" + path + "': architecture '" + std::string(f.architecture()) +
                       "' is not supported (llama, qwen2, qwen3, qwen3moe, gemma3, gpt-oss)");
  }
  ModelLoader loader(f);
  Status st = loader.ReadSpec(*arch, &m->spec_);
  if (st.ok()) st = loader.ReadWeights(*arch, m->spec_, &m->weights_, &m->weight_bytes_);
  int ignored = 0;
  if (st.ok()) st = CheckNothingIgnored(f, *arch, loader.consumed, &ignored);
  if (!st.ok()) return st.WithContext("'" + path + "'");
  if (ignored > 0) {
    std::string parts;
    for (std::string_view p : arch->ignored_prefixes)
      parts += (parts.empty() ? "" : ", ") + std::string(p) + "*";
    m->load_note_ = "ignored " + std::to_string(ignored) + " tensors (" + parts +
                    ": the vision tower); kvmem runs the text model";
  }
  m->PackWeights();
  const uint64_t size = f.bytes().size();
  m->fingerprint_ = Fnv1a64(f.bytes().data(), static_cast<size_t>(f.data_offset()));
  m->fingerprint_ = Fnv1a64(&size, sizeof(size), m->fingerprint_);
  return m;
}

void Model::PackWeights() {
  if (!kernels::PackedKernelsEnabled()) return;
  std::vector<kernels::WeightMatrix*> todo;
  for (LayerWeights& l : weights_.layers) {
    for (kernels::WeightMatrix* w :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.router}) {
      if (w->data != nullptr && kernels::CanPack(w->type)) todo.push_back(w);
    }
    for (auto* experts : {&l.exp_gate, &l.exp_up, &l.exp_down}) {
      for (kernels::WeightMatrix& w : *experts) {
        if (kernels::CanPack(w.type)) todo.push_back(&w);
      }
    }
  }
  if (kernels::CanPack(weights_.output.type)) todo.push_back(&weights_.output);
  // Largest first, spread over a few threads (a load-time cost of ~2 ns per weight).
  std::sort(todo.begin(), todo.end(), [](const auto* a, const auto* b) {
    return a->row_bytes * a->n_out > b->row_bytes * b->n_out;
  });
  packed_.resize(todo.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < todo.size();) {
      // The file's copy is read a few more times at most (embedding rows of a tied output).
      packed_[i] =
          kernels::Pack(*todo[i], [&](const void* b, size_t n) { file_->DropPages(b, n); });
    }
  };
  const unsigned n_threads = std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < n_threads; ++t) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < todo.size(); ++i) {
    todo[i]->packed = packed_[i].get();
    packed_bytes_ += packed_[i]->bytes();
    packed_source_bytes_ += todo[i]->row_bytes * static_cast<size_t>(todo[i]->n_out);
  }
  // A tied table's embedding rows come from the LM head's packed copy (the same values).
  if (spec_.tied_output) weights_.tok_embd.packed = weights_.output.packed;
}

size_t Model::expert_bytes() const {
  size_t bytes = 0;
  for (const LayerWeights& l : weights_.layers) {
    for (const auto* experts : {&l.exp_gate, &l.exp_up, &l.exp_down}) {
      for (const kernels::WeightMatrix& w : *experts) {
        bytes += w.packed != nullptr ? w.packed->bytes() : w.row_bytes * w.n_out;
      }
    }
  }
  return bytes;
}

kv::KvGeometry Model::kv_geometry(int block_rows) const {
  return {spec_.n_layers, spec_.n_kv_heads, spec_.head_dim_k, spec_.head_dim_v, block_rows};
}

std::vector<kv::RopeSpec> Model::rope_specs() const {
  std::vector<kv::RopeSpec> specs;
  specs.reserve(spec_.layers.size());
  for (const LayerSpec& l : spec_.layers) {
    specs.push_back({spec_.rope_dim, l.rope_freq_base, spec_.rope_mode, spec_.rope_freq_factors,
                     l.rope_scaling});
  }
  return specs;
}

}  // namespace kvmem::model
