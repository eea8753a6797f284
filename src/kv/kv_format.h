// The storage formats of the KV cache, chosen per model run separately for K and V (llama.cpp's
// -ctk / -ctv). Each name maps to the attention kernel's storage types (kernels/attention.h):
//
//   name    K                                          V
//   f16     f16 rows                                   f16 rows
//   q8_0    ggml Q8_0 rows (blocks of 32 along dims)   Q8_0 rows
//   q4_0    ggml Q4_0 rows                             Q4_0 rows
//   kivi4   KIVI: per-channel 4-bit over groups of     per-token asymmetric 4-bit (ggml Q4_1)
//           32 rows, the newest incomplete group in
//           f16 (kernels/kivi.h)
//
// Quantized formats need head_dim to be a multiple of 32. Thread-safe: constants and pure
// functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "kernels/attention.h"

namespace kvmem::kv {

enum class KvFormat : uint8_t { kF16 = 0, kQ8_0 = 1, kQ4_0 = 2, kKivi4 = 3 };

struct KvFormats {
  KvFormat k = KvFormat::kF16;
  KvFormat v = KvFormat::kF16;
  bool operator==(const KvFormats&) const = default;
};

const char* KvFormatName(KvFormat f);
// "f16", "q8_0", "q4_0" or "kivi4"; anything else is InvalidArgument naming the valid names.
Result<KvFormat> ParseKvFormat(std::string_view name);
// "f16, q8_0, q4_0, kivi4", for help texts.
std::string KvFormatNames();

kernels::KType KTypeOf(KvFormat f);
kernels::VType VTypeOf(KvFormat f);

// Whether the formats can store heads of these sizes (InvalidArgument naming format and size).
Status CheckKvFormats(KvFormats formats, int head_dim_k, int head_dim_v);

// Bytes one token takes in one layer: n_kv_heads K rows and V rows, scales included (kivi4 K
// amortized over its group of 32 rows, staging of incomplete groups not counted).
size_t KvBytesPerTokenLayer(KvFormats formats, int n_kv_heads, int head_dim_k, int head_dim_v);

}  // namespace kvmem::kv
