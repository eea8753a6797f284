// Weight matrices repacked at load for integer dot products on 16 rows at once (AVX-512 VNNI),
// the layout llama.cpp's CPU "extra buffer types" use in spirit: 16 rows are interleaved so one
// vpdpbusd multiplies 4 consecutive elements of all 16 rows by the same 4 activation bytes, and
// each of the 16 int32 lanes is one row's partial sum — no horizontal reductions.
//
// The repack is lossless: codes, scales and mins are the source's own (the products d * sc of the
// K-quants are exact in fp32), so the integer sums per sub-block are those of the source's ggml
// dot product and only the order of the float accumulation differs.
//   kU4 (32-element sub-blocks): x = scale * q + min, q in 0..15.
//       Q4_0 (min = -8 d), Q4_1 (d, m), Q4_K (d * sc, -dmin * m).
//   kS8 (32- or 16-element sub-blocks): x = scale * q, q in -128..127.
//       Q8_0, Q5_0 (q - 16), Q6_K (16-element sub-blocks, scale d * sc, q - 32), MXFP4 (q the
//       value table's code, scale 2^(e - 128)).
// Scales and mins are stored as fp16 where every one of the matrix is exactly representable
// (Q4_0, Q4_1, Q5_0, Q8_0), else as fp32.
//
// Layout: rows are grouped by 16 (the last group padded with zero rows); a group is n_in / block
// consecutive "tiles", one per sub-block, each holding
//   codes: block / 4 chunks of 64 bytes; chunk c holds 4 bytes per row (row r at 4 r). kS8: byte
//          j of row r is element 4 c + j. kU4 (block 32, 4 chunks of 64 bytes): the low nibble is
//          element 4 c + j, the high nibble element 16 + 4 c + j.
//   scales: 16 scales (fp16 or fp32), one per row.
//   kU4: 16 mins, as the scales.  kS8: 16 int16 code sums per row (the kernel multiplies
//        unsigned activations, a + 128, and subtracts 128 * sum).
// Thread-safety: immutable after Pack; safe for concurrent reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/dtype.h"

namespace kvmem::kernels {

struct WeightMatrix;

// Called with consecutive ranges of the source matrix once Pack has read them for the last time
// in a pass (a few MiB at a time), so a caller can drop their pages as it goes.
using SourceDone = std::function<void(const void* begin, size_t bytes)>;

enum class PackedKind { kU4, kS8 };

inline constexpr int kPackRows = 16;

class PackedMatrix {
 public:
  PackedKind kind() const { return kind_; }
  int block() const { return block_; }  // elements per sub-block: 32 or 16
  bool f16_scales() const { return f16_scales_; }
  int64_t n_in() const { return n_in_; }
  int64_t n_out() const { return n_out_; }
  int64_t n_groups() const { return (n_out_ + kPackRows - 1) / kPackRows; }
  // The activation format of the source's dot product (Q8_0, Q8_1 or Q8_K): activations are
  // quantized exactly as for the unpacked kernels.
  DType act_type() const { return act_type_; }
  size_t tile_bytes() const { return tile_bytes_; }
  size_t group_bytes() const { return tile_bytes_ * static_cast<size_t>(n_in_ / block_); }
  const uint8_t* group(int64_t g) const { return data_.get() + g * group_bytes(); }
  size_t bytes() const { return group_bytes() * static_cast<size_t>(n_groups()); }

  // Row r dequantized from the packed form (tests; equals the source's dequantization).
  void DequantizeRow(int64_t r, float* out) const;

 private:
  friend std::unique_ptr<PackedMatrix> Pack(const WeightMatrix& w, const SourceDone& done);
  struct Free {
    void operator()(uint8_t* p) const;
  };

  PackedKind kind_ = PackedKind::kU4;
  int block_ = 32;
  bool f16_scales_ = false;
  int64_t n_in_ = 0;
  int64_t n_out_ = 0;
  DType act_type_ = DType::kQ8_0;
  size_t tile_bytes_ = 0;
  std::unique_ptr<uint8_t[], Free> data_;  // 64-byte aligned
};

// True if Pack handles this weight type.
bool CanPack(DType type);
// The packed form of w, or nullptr if its type cannot be packed. Reads the source twice (a
// pass choosing fp16 or fp32 scales, then the copy); `done` may be empty.
std::unique_ptr<PackedMatrix> Pack(const WeightMatrix& w, const SourceDone& done = {});

}  // namespace kvmem::kernels
