// libFuzzer target for the GGUF reader: parses arbitrary bytes from memory and, when they parse,
// reads every metadata value through every getter and touches the first and last byte of every
// tensor, so that ASan flags any view that escapes the input. See fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <span>

#include "gguf/gguf_file.h"

namespace kvmem::gguf {
namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

void Touch(const Value& v, uint64_t* sink, int depth) {
  Check(depth <= kMaxArrayDepth);
  if (auto u = v.AsUint()) *sink += *u;
  if (auto i = v.AsInt()) *sink += static_cast<uint64_t>(*i);
  if (auto f = v.AsFloat()) *sink += static_cast<uint64_t>(*f != 0);
  if (auto b = v.AsBool()) *sink += *b;
  if (auto s = v.AsString(); s && !s->empty()) *sink += static_cast<uint8_t>(s->back());
  *sink += v.TypeName().size();
  if (const Array* a = v.AsArray()) {
    for (uint64_t i = 0; i < a->size(); ++i) Touch(a->at(i), sink, depth + 1);
    if (!a->raw().empty()) *sink += a->raw().back();
    *sink += a->strings().size();
  }
}

void TouchGetters(const GgufFile& f, std::string_view key, uint64_t* sink) {
  *sink += f.GetUint(key).ok() + f.GetInt(key).ok() + f.GetFloat(key).ok() + f.GetBool(key).ok() +
           f.GetString(key).ok() + f.GetArray(key).ok() + f.GetStringArray(key).ok() +
           f.GetFloatArray(key).ok() + f.GetInt32Array(key).ok();
  *sink += f.GetUintOr(key, 1).ok() + f.GetStringOr(key, "x").ok();
}

}  // namespace
}  // namespace kvmem::gguf

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvmem::gguf;
  kvmem::Result<GgufFile> r = GgufFile::Parse(std::span<const uint8_t>(data, size));
  if (!r.ok()) {
    Check(!r.status().message().empty());
    return 0;
  }
  const GgufFile& f = *r;
  Check(f.alignment() != 0 && (f.alignment() & (f.alignment() - 1)) == 0);
  volatile uint64_t out = 0;
  uint64_t sink = 0;
  for (const KeyValue& kv : f.metadata()) {
    Check(f.Find(kv.key) == &kv.value);
    Touch(kv.value, &sink, 0);
    TouchGetters(f, kv.key, &sink);
  }
  for (int k = 0; k < kNumKeys; ++k) {
    auto key = static_cast<Key>(k);
    sink += f.Has(key) + f.GetUint(key).ok() + f.GetFloat(key).ok() + f.GetString(key).ok() +
            f.GetStringArray(key).ok() + f.GetInt32Array(key).ok();
  }
  const uint8_t* end = data + size;
  for (const TensorInfo& t : f.tensors()) {
    Check(f.FindTensor(t.name) == &t);
    Check(t.n_dims >= 1 && t.n_dims <= kMaxDims && t.n_bytes > 0);
    Check(t.data >= data + f.data_offset() && t.n_bytes <= static_cast<uint64_t>(end - t.data));
    sink += t.data[0] + t.data[t.n_bytes - 1];
  }
  out = sink;
  (void)out;
  return 0;
}
