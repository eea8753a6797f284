// Writes a seed corpus for gguf_fuzz: small valid GGUF files covering every metadata type,
// nested arrays, alignments and tensor types. Usage: gguf_fuzz_seeds <dir>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gguf_test_writer.h"

namespace {

using kvmem::DType;
using kvmem::gguf::ValueType;
using kvmem::gguf::testing::ByteWriter;
using kvmem::gguf::testing::GgufBuilder;

constexpr uint32_t Id(DType t) { return static_cast<uint32_t>(t); }

std::vector<std::vector<uint8_t>> Seeds() {
  std::vector<std::vector<uint8_t>> seeds;
  seeds.push_back(GgufBuilder().Build());
  GgufBuilder scalars;
  scalars.String("general.architecture", "llama")
      .Scalar("llama.block_count", ValueType::kUint32, 2u)
      .Scalar("a.u8", ValueType::kUint8, uint8_t{7})
      .Scalar("a.i8", ValueType::kInt8, int8_t{-7})
      .Scalar("a.u16", ValueType::kUint16, uint16_t{7})
      .Scalar("a.i16", ValueType::kInt16, int16_t{-7})
      .Scalar("a.i32", ValueType::kInt32, -7)
      .Scalar("a.f32", ValueType::kFloat32, 0.5f)
      .Scalar("a.bool", ValueType::kBool, uint8_t{1})
      .Scalar("a.u64", ValueType::kUint64, uint64_t{7})
      .Scalar("a.i64", ValueType::kInt64, int64_t{-7})
      .Scalar("a.f64", ValueType::kFloat64, 0.25)
      .String("tokenizer.ggml.model", "gpt2");
  seeds.push_back(scalars.Build());
  GgufBuilder arrays;
  arrays.String("general.architecture", "qwen3")
      .StringArray("tokenizer.ggml.tokens", {"a", "b", "ab"})
      .ScalarArray<float>("tokenizer.ggml.scores", ValueType::kFloat32, {0.f, -1.f, -2.f})
      .ScalarArray<int32_t>("tokenizer.ggml.token_type", ValueType::kInt32, {1, 1, 3})
      .ScalarArray<uint8_t>("a.bools", ValueType::kBool, {0, 1})
      .Kv("a.nested", static_cast<uint32_t>(ValueType::kArray), [](ByteWriter& w) {
        w.Type(ValueType::kArray).U64(2);
        w.Type(ValueType::kString).U64(1).Str("x");
        w.Type(ValueType::kArray).U64(1).Type(ValueType::kUint16).U64(1).Put(uint16_t{3});
      });
  seeds.push_back(arrays.Build());
  GgufBuilder tensors;
  tensors.String("general.architecture", "llama")
      .Alignment(64)
      .Tensor("token_embd.weight", {32, 2}, Id(DType::kQ8_0))
      .Tensor("blk.0.attn_norm.weight", {8}, Id(DType::kF32))
      .Tensor("output.weight", {256, 1}, Id(DType::kQ4_K))
      .Tensor("t.3d", {2, 2, 2}, Id(DType::kF16))
      .Tensor("t.4d", {1, 2, 1, 2}, Id(DType::kBF16));
  seeds.push_back(tensors.Build());
  GgufBuilder v2;
  v2.Version(2).Tensor("w", {32}, Id(DType::kQ4_0)).Tensor("v", {32}, Id(DType::kQ5_1));
  seeds.push_back(v2.Build());
  return seeds;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dir>\n", argv[0]);
    return 2;
  }
  std::filesystem::create_directories(argv[1]);
  std::vector<std::vector<uint8_t>> seeds = Seeds();
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::string path = std::string(argv[1]) + "/seed" + std::to_string(i) + ".gguf";
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(seeds[i].data()),
              static_cast<std::streamsize>(seeds[i].size()));
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      return 1;
    }
  }
  std::printf("wrote %zu seeds to %s\n", seeds.size(), argv[1]);
  return 0;
}
