#include "kv/kv_format.h"

#include <iterator>
#include <string>

namespace kvmem::kv {
namespace {

struct FormatEntry {
  KvFormat format;
  const char* name;
  kernels::KType k;
  kernels::VType v;
};

// The one table of formats: name and the kernel storage types of K and V.
constexpr FormatEntry kFormats[] = {
    {KvFormat::kF16, "f16", kernels::KType::kF16, kernels::VType::kF16},
    {KvFormat::kQ8_0, "q8_0", kernels::KType::kQ8_0, kernels::VType::kQ8_0},
    {KvFormat::kQ4_0, "q4_0", kernels::KType::kQ4_0, kernels::VType::kQ4_0},
    {KvFormat::kKivi4, "kivi4", kernels::KType::kKivi4, kernels::VType::kQ4_1},
};

const FormatEntry& Entry(KvFormat f) { return kFormats[static_cast<int>(f)]; }

static_assert([] {
  for (int i = 0; i < static_cast<int>(std::size(kFormats)); ++i) {
    if (static_cast<int>(kFormats[i].format) != i) return false;
  }
  return true;
}());

Status CheckHeadDim(KvFormat f, const char* what, int head_dim) {
  if (head_dim <= 0)
    return InvalidArgument(std::string("KV ") + what + " head_dim must be positive");
  if (f != KvFormat::kF16 && head_dim % 32 != 0) {
    return InvalidArgument(std::string("KV format ") + KvFormatName(f) + " for " + what +
                           " needs head_dim to be a multiple of 32; the model has " +
                           std::to_string(head_dim));
  }
  return Status::Ok();
}

}  // namespace

const char* KvFormatName(KvFormat f) { return Entry(f).name; }

std::string KvFormatNames() {
  std::string names;
  for (const FormatEntry& e : kFormats) {
    if (!names.empty()) names += ", ";
    names += e.name;
  }
  return names;
}

Result<KvFormat> ParseKvFormat(std::string_view name) {
  for (const FormatEntry& e : kFormats) {
    if (name == e.name) return e.format;
  }
  return InvalidArgument("unknown KV cache format '" + std::string(name) +
                         "' (valid: " + KvFormatNames() + ")");
}

kernels::KType KTypeOf(KvFormat f) { return Entry(f).k; }
kernels::VType VTypeOf(KvFormat f) { return Entry(f).v; }

Status CheckKvFormats(KvFormats formats, int head_dim_k, int head_dim_v) {
  if (Status s = CheckHeadDim(formats.k, "K", head_dim_k); !s.ok()) return s;
  if (Status s = CheckHeadDim(formats.v, "V", head_dim_v); !s.ok()) return s;
  if (formats != KvFormats{} && head_dim_k != head_dim_v) {
    return InvalidArgument("quantized KV formats need equal K and V head sizes; the model has " +
                           std::to_string(head_dim_k) + " and " + std::to_string(head_dim_v));
  }
  return Status::Ok();
}

size_t KvBytesPerTokenLayer(KvFormats formats, int n_kv_heads, int head_dim_k, int head_dim_v) {
  return static_cast<size_t>(n_kv_heads) * (kernels::KRowBytes(KTypeOf(formats.k), head_dim_k) +
                                            kernels::VRowBytes(VTypeOf(formats.v), head_dim_v));
}

}  // namespace kvmem::kv
