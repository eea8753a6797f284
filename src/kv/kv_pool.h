// The paged store of every K/V row of every layer. Storage is a set of blocks; a block holds
// `block_rows` token rows for all layers and all KV heads, so a row is named by (block, row) in
// every layer at once. Keys are stored already rotated by RoPE at the position recorded for the
// row (`rotated_pos`); moving a row to another logical position re-rotates it in place
// (Reposition), an exact rotation by the difference, losing only the storage format's rounding.
// This keeps the plain decode path free of per-step rotation while history can be re-placed
// without a forward pass (DESIGN.md "Positions are decoupled from storage").
//
// Rows are stored in the pool's KvFormats (kv_format.h), read in place by the attention kernel.
// Each layer of a block is its own allocation of layer_bytes(), so a sliding-window layer can
// give back the storage of rows it will never read again (ReleaseLayer) while global layers keep
// theirs; released layer storage is reused by later blocks. Layout of one layer of a block, per
// KV head h (bytes):
//   K[h] : block_rows rows of KRowBytes(k type, head_dim_k); kivi4: block_rows / 32 groups of
//          KiviGroupBytes(head_dim_k)
//   V[h] : block_rows rows of VRowBytes(v type, head_dim_v)   (all K heads first, then all V)
// so attention reads each (layer, head) of a block as one span. kivi4 K keeps the rows of each
// (layer, head)'s newest incomplete group of 32 in an f16 staging area of the block (allocated
// while the block has incomplete groups; rows past the last whole group of a block whose
// block_rows is not a multiple of 32 stay there), and quantizes a group when its 32nd row is
// written.
//
// Write order: each layer of a block has a count of written rows (rows [0, written) hold data).
// Writing row `written` appends; writing an earlier row overwrites it in place (recomputation;
// for kivi4 K a row of a whole group requantizes that group, adding up to one more budget of
// error to its other rows); kivi4 K asserts no row is skipped. DropRows lowers the count when a
// sequence is truncated, so rows re-appended after the cut go through staging again instead
// of requantizing a group once per row.
//
// Thread-safety: Allocate/Free/ReleaseLayer/LoadLayer (and its two steps), WriteToken and
// Reposition mutate; WriteToken calls for distinct blocks may run concurrently, those for one
// block may not, and so may the fills of storage LoadLayerStorage gave for distinct blocks.
// Span/Attend/ReadToken are const and may run concurrently with each other.
// Allocate, Free, ReleaseLayer and LoadLayer's storage bookkeeping take one mutex, and the block
// table is reserved at construction (never reallocated), so one pool may be shared by several
// sequences on several threads (the prefix cache's pool, memory/prefix/prefix_cache.h): one
// thread may allocate or free blocks while others write or attend over rows of *other* blocks in
// use. The counters below (blocks_in_use, bytes_in_use, ...) read under the same mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "core/status.h"
#include "kernels/attention.h"
#include "kernels/ops.h"
#include "kv/kv_format.h"
#include "kv/layer_chunks.h"

namespace kvmem::kernels {
struct TypeTraits;
}

namespace kvmem::kv {

struct KvGeometry {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim_k = 0;
  int head_dim_v = 0;
  int block_rows = 256;
};

// How keys of one layer are rotated (differs per layer for sliding-window models).
struct RopeSpec {
  int rot_dim = 0;
  float freq_base = 10000.0f;
  kernels::RopeMode mode = kernels::RopeMode::kNormal;
  std::vector<float> freq_factors;    // (rot_dim / 2) or empty: kernels::Rope's freq_factors
  kernels::RopeScaling scaling = {};  // linear and YaRN scaling of the angles
  const float* factors() const { return freq_factors.empty() ? nullptr : freq_factors.data(); }
};

struct RowRef {
  int32_t block = -1;
  int32_t row = -1;
  bool operator==(const RowRef&) const = default;
};

inline constexpr int64_t kNoPosition = INT64_MIN;

class KvPool {
 public:
  // max_blocks bounds memory: Allocate fails with ResourceExhausted beyond it. Requires
  // CheckKvFormats(formats, head_dim_k, head_dim_v).ok(). chunks, when given, supplies layer
  // storage (chunk_bytes() == layer_bytes()) and gets it all back when the pool is destroyed;
  // it must outlive the pool.
  KvPool(KvGeometry geometry, int max_blocks, KvFormats formats = {},
         LayerChunks* chunks = nullptr);
  ~KvPool();
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  const KvGeometry& geometry() const { return geo_; }
  const KvFormats& formats() const { return formats_; }
  int max_blocks() const { return max_blocks_; }
  int blocks_in_use() const;
  // Stored bytes of one block (all layers, K and V, scales included; kivi4 staging excluded).
  size_t bytes_per_block() const { return layer_bytes_ * geo_.n_layers; }
  // Stored bytes of one layer of a block.
  size_t layer_bytes() const { return layer_bytes_; }
  // Layer storage held by blocks in use (released layers excluded), and the most ever held.
  size_t bytes_in_use() const;
  size_t peak_bytes_in_use() const;
  // Bytes one token takes in the pool, all layers, K and V (kivi4 K amortized over its groups).
  size_t bytes_per_token() const { return token_bytes_; }
  // kivi4 K staging currently allocated, all blocks.
  size_t staging_bytes() const;

  // A fresh block whose rows have no position yet, with storage in every layer. Memory is reused
  // from freed blocks and released layers first.
  Result<int32_t> Allocate();
  void Free(int32_t block);
  // Gives back one layer's storage of a block in use (a sliding-window layer whose rows are all
  // out of reach): the layer then holds no rows and must not be read or written until the block
  // is freed. Idempotent.
  void ReleaseLayer(int32_t block, int layer);
  bool has_layer(int32_t block, int layer) const { return blocks_[block].layers[layer] != nullptr; }
  // True if every layer of the block has storage (rows can be written to it).
  bool has_all_layers(int32_t block) const;

  // Persistence: the stored bytes of one layer of a block (layer_bytes(): K of every KV head,
  // then V of every KV head, the layout above) and, for kivi4 K with rows past the last whole
  // group, that layer's f16 staging (n_kv_heads, 32, head_dim_k); both empty when released.
  struct RawLayer {
    std::span<const uint8_t> data;
    std::span<const uint16_t> staging;
  };
  RawLayer raw_layer(int32_t block, int layer) const;
  // Fills one layer of a block in use with what raw_layer() gave for a pool of the same geometry
  // and formats: rows [0, n_rows) become written. staging is required exactly when raw_layer()
  // would give it (kivi4, n_rows not a multiple of 32). Fails on any size mismatch.
  Status LoadLayer(int32_t block, int layer, std::span<const uint8_t> data,
                   std::span<const uint16_t> staging, int32_t n_rows);
  // LoadLayer in place, for a reader that reads the bytes straight into the pool:
  // LoadLayerStorage gives the layer's storage (layer_bytes(), taken when the layer has none)
  // to be filled with what raw_layer() gave; CommitLoadedLayer then checks and makes rows
  // [0, n_rows) written as LoadLayer does. Until the commit the layer's rows are as before.
  std::span<uint8_t> LoadLayerStorage(int32_t block, int layer);
  Status CommitLoadedLayer(int32_t block, int layer, std::span<const uint16_t> staging,
                           int32_t n_rows);

  // Raw rows of a pool whose K (V) format is f16, for tests and tools: (block_rows, head_dim_k)
  // keys (head_dim_v values) of one layer and KV head. Only rows already written hold data.
  uint16_t* K(int32_t block, int layer, int head);
  const uint16_t* K(int32_t block, int layer, int head) const;
  uint16_t* V(int32_t block, int layer, int head);
  const uint16_t* V(int32_t block, int layer, int head) const;

  // Stores one token's K and V rows of `layer`: k (n_kv_heads, head_dim_k), v (n_kv_heads,
  // head_dim_v), converted to the pool's formats. See "Write order" above.
  void WriteToken(RowRef r, int layer, const float* k, const float* v);
  // Rows [first_row, block_rows) of `block` no longer hold data in any layer (the owner
  // truncated its sequence there); the next write to the block appends at first_row. kivi4: a
  // whole group cut open goes back to f16 staging (its kept rows dequantized once).
  void DropRows(int32_t block, int32_t first_row);
  // Rows of `layer` of `block` written so far (see "Write order").
  int32_t written_rows(int32_t block, int layer) const { return blocks_[block].written[layer]; }
  // The stored rows of one token and layer, dequantized: k (n_kv_heads, head_dim_k),
  // v (n_kv_heads, head_dim_v). The row must have been written.
  void ReadToken(RowRef r, int layer, float* k, float* v) const;

  // Rows [first_row, first_row + n_rows) of one block, layer and KV head, as the attention
  // kernel reads them; the rows must have been written. Valid until the next write to the
  // block and layer (a kivi4 group may move from staging into its quantized form).
  kernels::KvSpan Span(int32_t block, int layer, int head, int32_t first_row, int32_t n_rows) const;
  // How this pool's rows are stored, for the attention kernel.
  const kernels::KvLayout& layout() const { return layout_; }
  // out (head_dim_v) = attention of q (head_dim_k) over the rows of `spans`, in order, with an
  // attention sink (kernels::Attend's; -inf: none).
  void Attend(const float* q, const kernels::KvSpan* spans, int n_spans, float scale, float* out,
              float sink = -std::numeric_limits<float>::infinity()) const;
  // kernels::AttendPartial over this pool's layout (where AttendPartialSupported()).
  bool AttendPartialSupported() const { return kernels::AttendPartialSupported(layout_); }
  void AttendPartial(const float* q, int n_q, const kernels::KvSpan* spans, int n_spans,
                     float scale, float* acc, float* m, float* l) const {
    kernels::AttendPartial(q, n_q, layout_, spans, n_spans, scale, acc, m, l);
  }
  // The softmax weights of the same computation, one per row (for taps).
  void AttentionWeights(const float* q, const kernels::KvSpan* spans, int n_spans, float scale,
                        float* weights) const;

  // The position the stored keys of a row were rotated at (same in every layer), or kNoPosition.
  int64_t rotated_pos(RowRef r) const { return blocks_[r.block].rotated_pos[r.row]; }
  void set_rotated_pos(RowRef r, int64_t pos) { blocks_[r.block].rotated_pos[r.row] = pos; }

  // Re-rotates the keys of `n` consecutive rows starting at `first` in every layer so that they
  // read as if computed at positions new_pos, new_pos+1, ...; `rope` has one entry per layer.
  // Rows without a position are left alone. Quantized keys are dequantized, rotated and
  // requantized (kivi4: the whole group of a moved row is requantized; staged rows rotate in f16).
  void Reposition(RowRef first, int n, int64_t new_pos, const std::vector<RopeSpec>& rope);

 private:
  using LayerData = std::unique_ptr<uint8_t[]>;
  struct Block {
    std::vector<LayerData> layers;        // (n_layers) {K heads, V heads}; null when released
    std::unique_ptr<uint16_t[]> staging;  // kivi4: (n_layers, n_kv_heads, 32, head_dim_k) f16
    std::vector<int64_t> rotated_pos;     // (block_rows)
    std::vector<int32_t> written;         // (n_layers) rows [0, written[l]) hold data
    bool used = false;
  };
  bool kivi() const { return layout_.k == kernels::KType::kKivi4; }
  LayerData TakeLayerStorage();
  // LoadLayer's checks of a row count and a staging size.
  Status CheckLoad(int32_t n_rows, size_t staging_size) const;
  // kivi4: frees b's staging once no layer with storage can have rows outside whole groups.
  void MaybeFreeStaging(Block& b) const;
  uint8_t* KData(Block& b, int layer, int head) const;
  const uint8_t* KData(const Block& b, int layer, int head) const;
  uint8_t* VData(Block& b, int layer, int head) const;
  const uint8_t* VData(const Block& b, int layer, int head) const;
  // kivi4 staging of (layer, head): (32, head_dim_k) f16.
  uint16_t* Staging(Block& b, int layer, int head) const;
  const uint16_t* Staging(const Block& b, int layer, int head) const;
  // Rows of a layer that sit in whole (quantized) kivi4 groups.
  static int32_t QuantizedRows(int32_t written);
  // kivi4: puts rows [32g, row) of the whole group holding `row` back into staging.
  void UnquantizeGroupPrefix(Block& b, int layer, int32_t row);
  // kivi4: overwrites row r of a whole group with k (n_kv_heads, head_dim_k), requantizing it.
  void RewriteQuantizedRow(Block& b, int layer, int32_t row, const float* k);
  void RepositionLayer(Block& b, int layer, int32_t first_row, const std::vector<int64_t>& delta,
                       const RopeSpec& rope);

  KvGeometry geo_;
  int max_blocks_;
  KvFormats formats_;
  kernels::KvLayout layout_;
  const kernels::TypeTraits* k_traits_ = nullptr;  // per-row K types: row conversions
  const kernels::TypeTraits* v_traits_ = nullptr;
  size_t k_row_bytes_ = 0;  // per-row K types
  size_t v_row_bytes_ = 0;
  size_t k_head_bytes_ = 0;  // one (layer, head)'s K region of a block
  size_t v_head_bytes_ = 0;
  size_t layer_bytes_ = 0;
  size_t token_bytes_ = 0;
  size_t staging_elems_ = 0;  // per block
  mutable std::mutex mu_;  // free_, spare_layers_, the counters; blocks_ never reallocates
  std::vector<Block> blocks_;  // reserved for max_blocks_
  std::vector<int32_t> free_;
  std::vector<LayerData> spare_layers_;  // released layer storage, reused before new memory
  LayerChunks* chunks_ = nullptr;
  int in_use_ = 0;
  size_t layers_in_use_ = 0;
  size_t peak_layers_in_use_ = 0;
};

}  // namespace kvmem::kv
