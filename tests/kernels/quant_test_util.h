// Helpers for the quantization and matmul tests: misaligned buffers, valid random blocks of every
// format, and per-ISA table access. Test-only; not thread-safe (tests share one RNG per test).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "kernels/cpu_features.h"
#include "kernels/quant_blocks.h"
#include "kernels/type_traits.h"

namespace kvmem::kernels::quant_testing {

// Every type with kernels, in table order.
inline const std::vector<DType>& AllTypes() {
  static const std::vector<DType> types = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0,
                                           DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
                                           DType::kQ8_1, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                                           DType::kQ5_K, DType::kQ6_K, DType::kQ8_K, DType::kMxfp4};
  return types;
}

// The ISAs this machine runs; the scalar reference first.
inline std::vector<Isa> RunnableIsas() {
  std::vector<Isa> isas = {Isa::kScalar};
  if (CpuSupports(Isa::kAvx2) && GetTypeTraits(DType::kF32, Isa::kAvx2) != nullptr) {
    isas.push_back(Isa::kAvx2);
  }
  return isas;
}

inline const TypeTraits& Traits(DType t, Isa isa) {
  const TypeTraits* tr = GetTypeTraits(t, isa);
  EXPECT_NE(tr, nullptr) << DTypeName(t) << " " << IsaName(isa);
  return *tr;
}

inline int64_t BlockSize(DType t) { return GetDTypeInfo(t)->block_size; }

inline size_t RowSize(DType t, int64_t n) {
  size_t bytes = 0;
  EXPECT_TRUE(RowBytes(t, n, &bytes)) << DTypeName(t) << " n=" << n;
  return bytes;
}

// A byte buffer whose data() sits `offset` bytes past a 64-byte boundary, with guard bytes after
// it to catch overruns.
class Buffer {
 public:
  static constexpr uint8_t kGuard = 0xA5;
  Buffer(size_t size, size_t offset) : size_(size), storage_(size + offset + 64 + 64, kGuard) {
    const auto base = reinterpret_cast<uintptr_t>(storage_.data());
    start_ = static_cast<size_t>((64 - base % 64) % 64) + offset;
  }
  uint8_t* data() { return storage_.data() + start_; }
  const uint8_t* data() const { return storage_.data() + start_; }
  size_t size() const { return size_; }
  bool GuardIntact() const {
    for (size_t i = start_ + size_; i < storage_.size(); ++i) {
      if (storage_[i] != kGuard) return false;
    }
    return true;
  }

 private:
  size_t size_;
  std::vector<uint8_t> storage_;
  size_t start_;
};

// A float buffer offset by `offset_floats` from a 64-byte boundary (float pointers stay
// 4-byte aligned: only quantized data may sit at any byte).
class FloatBuffer {
 public:
  FloatBuffer(size_t n, size_t offset_floats) : bytes_(n * sizeof(float), 4 * offset_floats) {}
  float* data() { return reinterpret_cast<float*>(bytes_.data()); }
  bool GuardIntact() const { return bytes_.GuardIntact(); }

 private:
  Buffer bytes_;
};

// Byte offsets (within a block) of a format's fp16 scale fields, and of its fp16 min fields (the
// additive part: m of Q4_1/Q5_1, dmin of the K-quants with mins).
struct ScaleFields {
  std::vector<size_t> scales;
  std::vector<size_t> mins;
};

inline ScaleFields FieldsOf(DType t) {
  switch (t) {
    case DType::kQ4_0:
      return {{offsetof(BlockQ4_0, d)}, {}};
    case DType::kQ4_1:
      return {{offsetof(BlockQ4_1, d)}, {offsetof(BlockQ4_1, m)}};
    case DType::kQ5_0:
      return {{offsetof(BlockQ5_0, d)}, {}};
    case DType::kQ5_1:
      return {{offsetof(BlockQ5_1, d)}, {offsetof(BlockQ5_1, m)}};
    case DType::kQ8_0:
      return {{offsetof(BlockQ8_0, d)}, {}};
    case DType::kQ2_K:
      return {{offsetof(BlockQ2_K, d)}, {offsetof(BlockQ2_K, dmin)}};
    case DType::kQ3_K:
      return {{offsetof(BlockQ3_K, d)}, {}};
    case DType::kQ4_K:
      return {{offsetof(BlockQ4_K, d)}, {offsetof(BlockQ4_K, dmin)}};
    case DType::kQ5_K:
      return {{offsetof(BlockQ5_K, d)}, {offsetof(BlockQ5_K, dmin)}};
    case DType::kQ6_K:
      return {{offsetof(BlockQ6_K, d)}, {}};
    default:
      return {};
  }
}

inline void PutHalf(uint8_t* p, float v) {
  const uint16_t h = F32ToF16(v);
  std::memcpy(p, &h, 2);
}

enum class Fill {
  kRandom,    // random codes, realistic scales
  kZeros,     // every byte zero (zero scales)
  kMaxCodes,  // every code bit set, realistic scales
  kMinCodes,  // every code bit clear, realistic scales
};

// What a row is for: weights may hold any code a file can hold; activations only what the
// quantizers produce (ggml's AVX2 int8 products rely on activation codes never being -128).
enum class Role { kWeight, kActivation };

// n elements of type t (n a multiple of its block size) into out. Weights get random bytes with
// their fp16 scales set to realistic values; activations, F32/F16/BF16 and the activation-only
// formats (Q8_1, Q8_K) are produced from random floats by the scalar quantizer, so they are valid
// by construction.
inline void FillBlocks(DType t, int64_t n, Fill fill, std::mt19937& rng, uint8_t* out,
                       Role role = Role::kWeight) {
  const size_t bytes = RowSize(t, n);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_mag(-3.0f, 0.0f);
  if (role == Role::kActivation || t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 ||
      t == DType::kQ8_1 || t == DType::kQ8_K) {
    std::vector<float> x(static_cast<size_t>(n));
    const float scale = std::pow(10.0f, log_mag(rng) + 1.5f);
    for (float& v : x) {
      switch (fill) {
        case Fill::kRandom:
          v = normal(rng) * scale;
          break;
        case Fill::kZeros:
          v = 0.0f;
          break;
        case Fill::kMaxCodes:
          v = scale;
          break;
        case Fill::kMinCodes:
          v = -scale;
          break;
      }
    }
    Traits(t, Isa::kScalar).from_float(x.data(), out, n);
    return;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  for (size_t i = 0; i < bytes; ++i) {
    switch (fill) {
      case Fill::kRandom:
        out[i] = static_cast<uint8_t>(byte(rng));
        break;
      case Fill::kZeros:
        out[i] = 0;
        break;
      case Fill::kMaxCodes:
        out[i] = 0xFF;
        break;
      case Fill::kMinCodes:
        out[i] = 0x00;
        break;
    }
  }
  if (fill == Fill::kZeros) return;
  const ScaleFields f = FieldsOf(t);
  const size_t block_bytes = GetDTypeInfo(t)->type_size;
  for (size_t b = 0; b < bytes / block_bytes; ++b) {
    uint8_t* block = out + b * block_bytes;
    for (size_t off : f.scales) PutHalf(block + off, std::pow(10.0f, log_mag(rng) - 1.0f));
    // Mins of the order of the scaled codes, as real models have them.
    for (size_t off : f.mins) PutHalf(block + off, -std::pow(10.0f, log_mag(rng) - 1.0f));
    // MXFP4's E8M0 scale byte: 2^(e - 128) of the same magnitudes (2^-14 .. 2^-1).
    if (t == DType::kMxfp4) block[0] = static_cast<uint8_t>(114 + byte(rng) % 14);
  }
}

// The same blocks with their min fields zeroed: dequantizing it gives the scaled-code part of
// each value, and the difference to the full dequantization the additive (min) part.
inline std::vector<uint8_t> WithoutMins(DType t, const uint8_t* data, int64_t n) {
  std::vector<uint8_t> copy(data, data + RowSize(t, n));
  const ScaleFields f = FieldsOf(t);
  const size_t block_bytes = GetDTypeInfo(t)->type_size;
  for (size_t b = 0; b < copy.size() / block_bytes; ++b) {
    for (size_t off : f.mins) std::memset(copy.data() + b * block_bytes + off, 0, 2);
  }
  return copy;
}

inline std::vector<float> Dequantize(DType t, const uint8_t* data, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  Traits(t, Isa::kScalar).to_float(data, out.data(), n);
  return out;
}

// A bound on the magnitude of sum_i x_i y_i that every float rounding inside a dot product is
// relative to: sum_i (|scaled-code part of x_i| + |min part of x_i|) * |y_i|, in double.
inline double DotMagnitude(DType xt, const uint8_t* x, DType yt, const uint8_t* y, int64_t n) {
  const std::vector<float> xf = Dequantize(xt, x, n);
  const std::vector<uint8_t> x0_bytes = WithoutMins(xt, x, n);
  const std::vector<float> x0 = Dequantize(xt, x0_bytes.data(), n);
  const std::vector<float> yf = Dequantize(yt, y, n);
  double m = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double scaled = std::fabs(static_cast<double>(x0[i]));
    const double min_part = std::fabs(static_cast<double>(xf[i]) - x0[i]);
    m += (scaled + min_part) * std::fabs(static_cast<double>(yf[i]));
  }
  return m;
}

}  // namespace kvmem::kernels::quant_testing
