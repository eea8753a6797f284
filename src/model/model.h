// A loaded model: the mmap'd GGUF, its ModelSpec and weight views. Loading dispatches on
// general.architecture to the family's Architecture record (llama.cpp, qwen2.cpp, qwen3.cpp,
// gemma3.cpp in this directory); the shared loader reads the hyper-parameters and tensors it
// names. Immutable after Load; thread-safe for concurrent reads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/gguf_file.h"
#include "kv/kv_pool.h"
#include "model/model_spec.h"
#include "model/weights.h"

namespace kvmem::model {

class Model {
 public:
  static Result<std::unique_ptr<Model>> Load(const std::string& path);

  const ModelSpec& spec() const { return spec_; }
  const ModelWeights& weights() const { return weights_; }
  const gguf::GgufFile& file() const { return *file_; }
  // FNV-1a over the GGUF header and tensor table: names the exact model a KV cache belongs to.
  uint64_t fingerprint() const { return fingerprint_; }
  // Bytes of all weight tensors in the file.
  size_t weight_bytes() const { return weight_bytes_; }
  // Bytes of the repacked copies of matrices (kernels/packed_matrix.h); 0 if none were packed.
  size_t packed_bytes() const { return packed_bytes_; }
  // Bytes of the file's tensors that packed copies replace in every forward pass.
  size_t packed_source_bytes() const { return packed_source_bytes_; }
  // Bytes of the experts' matrices as the forward pass reads them (packed copies where packed);
  // a token reads n_expert_used / n_expert of them per layer. 0 for a dense model.
  size_t expert_bytes() const;
  // What the file holds that kvmem ignores on purpose (Architecture::ignored_prefixes), as a
  // sentence for the user ("ignored 439 tensors (v.*, mm.*, vision.*): ..."); empty if nothing.
  const std::string& load_note() const { return load_note_; }

  kv::KvGeometry kv_geometry(int block_rows) const;
  // How each layer's keys are rotated (for re-positioning stored rows): (n_layers), since
  // Gemma-3's local and global layers use different RoPE bases.
  std::vector<kv::RopeSpec> rope_specs() const;

 private:
  friend class ModelLoader;
  Model() = default;
  // Repacks every matrix the packed kernels handle (not the embedding table, which is read a row
  // at a time), when kernels::PackedKernelsEnabled().
  void PackWeights();

  std::unique_ptr<gguf::GgufFile> file_;
  ModelSpec spec_;
  ModelWeights weights_;
  uint64_t fingerprint_ = 0;
  size_t weight_bytes_ = 0;
  std::vector<std::unique_ptr<kernels::PackedMatrix>> packed_;
  size_t packed_bytes_ = 0;
  size_t packed_source_bytes_ = 0;
  std::string load_note_;
};

}  // namespace kvmem::model
