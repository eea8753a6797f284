// Valid GGUF files: every metadata type read back, typed keys, getters' errors, tensor table, the
// real model when present. Malformed files are in gguf_corrupt_test.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_keys.h"
#include "gguf_test_writer.h"

namespace kvmem::gguf {
namespace {

using testing::GgufBuilder;
using testing::TensorByte;
using testing::TensorSpec;
using VT = ValueType;

constexpr uint32_t kF32 = static_cast<uint32_t>(DType::kF32);
constexpr uint32_t kF16 = static_cast<uint32_t>(DType::kF16);
constexpr uint32_t kBF16 = static_cast<uint32_t>(DType::kBF16);
constexpr uint32_t kQ8_0 = static_cast<uint32_t>(DType::kQ8_0);
constexpr uint32_t kQ4_K = static_cast<uint32_t>(DType::kQ4_K);

// A file with one key of every scalar type, arrays of several element types (nested, empty),
// and tensors of several types and ranks.
GgufBuilder EverythingBuilder() {
  GgufBuilder b;
  b.String("general.architecture", "llama")
      .String("general.name", "tiny")
      .Scalar("llama.block_count", VT::kUint32, uint32_t{2})
      .Scalar("llama.rope.freq_base", VT::kFloat32, 10000.0f)
      .Scalar("t.u8", VT::kUint8, uint8_t{200})
      .Scalar("t.i8", VT::kInt8, int8_t{-100})
      .Scalar("t.u16", VT::kUint16, uint16_t{60000})
      .Scalar("t.i16", VT::kInt16, int16_t{-30000})
      .Scalar("t.u32", VT::kUint32, uint32_t{4000000000u})
      .Scalar("t.i32", VT::kInt32, int32_t{-2000000000})
      .Scalar("t.f32", VT::kFloat32, 1.5f)
      .Scalar("t.bool", VT::kBool, uint8_t{1})
      .String("t.str", "h\xc3\xa9llo")
      .Scalar("t.u64", VT::kUint64, uint64_t{1} << 60)
      .Scalar("t.u64max", VT::kUint64, std::numeric_limits<uint64_t>::max())
      .Scalar("t.i64", VT::kInt64, -(int64_t{1} << 60))
      .Scalar("t.f64", VT::kFloat64, 2.25)
      .ScalarArray<uint8_t>("t.arr.u8", VT::kUint8, {1, 2, 3})
      .ScalarArray<int32_t>("t.arr.i32", VT::kInt32, {-1, 5, 7})
      .ScalarArray<uint64_t>("t.arr.u64", VT::kUint64, {1, uint64_t{1} << 40})
      .ScalarArray<float>("t.arr.f32", VT::kFloat32, {0.5f, -2.0f})
      .ScalarArray<double>("t.arr.f64", VT::kFloat64, {0.25, 8.0})
      .ScalarArray<uint8_t>("t.arr.bool", VT::kBool, {1, 0})
      .ScalarArray<int32_t>("t.arr.empty", VT::kInt32, {})
      .StringArray("t.arr.str", {"a", "", "bc"})
      .Kv("t.arr.nested", static_cast<uint32_t>(VT::kArray), [](testing::ByteWriter& w) {
        w.Type(VT::kArray).U64(2);
        w.Type(VT::kString).U64(2).Str("x").Str("y");
        w.Type(VT::kString).U64(1).Str("z");
      });
  b.Tensor("token_embd.weight", {64, 4}, kQ8_0)
      .Tensor("blk.0.attn_norm.weight", {64}, kF32)
      .Tensor("output.weight", {256, 2}, kQ4_K)
      .Tensor("t.f16.3d", {2, 3, 4}, kF16)
      .Tensor("t.bf16.4d", {1, 2, 1, 2}, kBF16);
  return b;
}

GgufFile MustParse(const std::vector<uint8_t>& bytes) {
  Result<GgufFile> f = GgufFile::Parse(bytes);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  if (!f.ok()) std::abort();
  return std::move(f).value();
}

TEST(GgufFile, ReadsEveryScalarType) {
  std::vector<uint8_t> bytes = EverythingBuilder().Build();
  GgufFile f = MustParse(bytes);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.architecture(), "llama");
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(*f.GetUint("t.u8"), 200u);
  EXPECT_EQ(*f.GetInt("t.i8"), -100);
  EXPECT_EQ(*f.GetUint("t.u16"), 60000u);
  EXPECT_EQ(*f.GetInt("t.i16"), -30000);
  EXPECT_EQ(*f.GetUint("t.u32"), 4000000000u);
  EXPECT_EQ(*f.GetInt("t.u32"), 4000000000);
  EXPECT_EQ(*f.GetInt("t.i32"), -2000000000);
  EXPECT_EQ(*f.GetFloat("t.f32"), 1.5f);
  EXPECT_EQ(*f.GetBool("t.bool"), true);
  EXPECT_EQ(*f.GetString("t.str"), "h\xc3\xa9llo");
  EXPECT_EQ(*f.GetUint("t.u64"), uint64_t{1} << 60);
  EXPECT_EQ(*f.GetUint("t.u64max"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(*f.GetInt("t.i64"), -(int64_t{1} << 60));
  EXPECT_EQ(*f.GetFloat("t.f64"), 2.25f);
  EXPECT_EQ(f.Find("t.f64")->AsFloat(), 2.25);
  EXPECT_EQ(f.Find("t.i16")->type(), VT::kInt16);
  EXPECT_EQ(f.Find("t.i16")->TypeName(), "int16");
}

TEST(GgufFile, ReadsArrays) {
  std::vector<uint8_t> bytes = EverythingBuilder().Build();
  GgufFile f = MustParse(bytes);
  EXPECT_EQ(*f.GetInt32Array("t.arr.u8"), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(*f.GetInt32Array("t.arr.i32"), (std::vector<int32_t>{-1, 5, 7}));
  EXPECT_EQ(*f.GetFloatArray("t.arr.f32"), (std::vector<float>{0.5f, -2.0f}));
  EXPECT_EQ(*f.GetFloatArray("t.arr.f64"), (std::vector<float>{0.25f, 8.0f}));
  EXPECT_TRUE(f.GetInt32Array("t.arr.empty")->empty());
  std::span<const std::string_view> strs = *f.GetStringArray("t.arr.str");
  EXPECT_EQ(std::vector<std::string_view>(strs.begin(), strs.end()),
            (std::vector<std::string_view>{"a", "", "bc"}));

  const Array* u64 = *f.GetArray("t.arr.u64");
  ASSERT_EQ(u64->size(), 2u);
  EXPECT_EQ(u64->elem_type(), VT::kUint64);
  EXPECT_EQ(u64->at(1).AsUint(), uint64_t{1} << 40);
  EXPECT_EQ(u64->raw().size(), 16u);
  const Array* bools = *f.GetArray("t.arr.bool");
  EXPECT_EQ(bools->at(0).AsBool(), true);
  EXPECT_EQ(bools->at(1).AsBool(), false);

  const Array* nested = *f.GetArray("t.arr.nested");
  EXPECT_EQ(f.Find("t.arr.nested")->TypeName(), "array of array of string");
  ASSERT_EQ(nested->size(), 2u);
  ASSERT_EQ(nested->elem_type(), VT::kArray);
  const Array* first = nested->at(0).AsArray();
  const Array* second = nested->at(1).AsArray();
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->at(1).AsString(), "y");
  ASSERT_EQ(second->size(), 1u);
  EXPECT_EQ(second->strings()[0], "z");
}

TEST(GgufFile, MetadataInFileOrder) {
  std::vector<uint8_t> bytes = EverythingBuilder().Build();
  GgufFile f = MustParse(bytes);
  ASSERT_EQ(f.metadata().size(), 26u);
  EXPECT_EQ(f.metadata()[0].key, "general.architecture");
  EXPECT_EQ(f.metadata()[25].key, "t.arr.nested");
  for (const KeyValue& kv : f.metadata()) EXPECT_EQ(f.Find(kv.key), &kv.value);
}

TEST(GgufFile, ReadsTensorTable) {
  std::vector<uint8_t> bytes = EverythingBuilder().Build();
  GgufFile f = MustParse(bytes);
  ASSERT_EQ(f.tensors().size(), 5u);
  EXPECT_EQ(f.data_offset() % 32, 0u);

  struct Expect {
    const char* name;
    int n_dims;
    std::array<int64_t, 4> dims;
    DType type;
    uint64_t n_bytes;
  };
  const Expect expected[] = {
      {"token_embd.weight", 2, {64, 4, 1, 1}, DType::kQ8_0, 4 * 2 * 34},
      {"blk.0.attn_norm.weight", 1, {64, 1, 1, 1}, DType::kF32, 64 * 4},
      {"output.weight", 2, {256, 2, 1, 1}, DType::kQ4_K, 2 * 144},
      {"t.f16.3d", 3, {2, 3, 4, 1}, DType::kF16, 24 * 2},
      {"t.bf16.4d", 4, {1, 2, 1, 2}, DType::kBF16, 4 * 2},
  };
  uint64_t next = 0;
  for (size_t i = 0; i < std::size(expected); ++i) {
    const Expect& e = expected[i];
    SCOPED_TRACE(e.name);
    const TensorInfo* t = f.FindTensor(e.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t, &f.tensors()[i]);
    EXPECT_EQ(t->name, e.name);
    EXPECT_EQ(t->n_dims, e.n_dims);
    for (int d = 0; d < 4; ++d) EXPECT_EQ(t->dims[d], e.dims[d]) << d;
    EXPECT_EQ(t->n_elements, e.dims[0] * e.dims[1] * e.dims[2] * e.dims[3]);
    EXPECT_EQ(t->rows(), t->n_elements / e.dims[0]);
    EXPECT_EQ(t->type, e.type);
    EXPECT_EQ(t->n_bytes, e.n_bytes);
    EXPECT_EQ(t->offset, (next + 31) / 32 * 32);
    next = t->offset + t->n_bytes;
    EXPECT_EQ(t->data, bytes.data() + f.data_offset() + t->offset);
    EXPECT_EQ(t->data[0], TensorByte(i, 0));
    EXPECT_EQ(t->data[t->n_bytes - 1], TensorByte(i, t->n_bytes - 1));
  }
  EXPECT_EQ(f.FindTensor("nope"), nullptr);
  Result<const TensorInfo*> missing = f.GetTensor("nope");
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'nope'"), std::string::npos);
  EXPECT_EQ(*f.GetTensor("output.weight"), f.FindTensor("output.weight"));
}

TEST(GgufFile, HonoursAlignmentAndVersion2) {
  GgufBuilder b;
  b.Version(2).Alignment(64).Tensor("a", {3}, kF32).Tensor("b", {5}, kF32);
  std::vector<uint8_t> bytes = b.Build();
  GgufFile f = MustParse(bytes);
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.FindTensor("b")->offset, 64u);
  EXPECT_EQ(f.architecture(), "");
}

TEST(GgufFile, EmptyFileSectionsParse) {
  std::vector<uint8_t> bytes = GgufBuilder().Build();  // header only: no keys, no tensors
  GgufFile f = MustParse(bytes);
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_TRUE(f.tensors().empty());
}

TEST(GgufFile, SurvivesMove) {
  std::vector<uint8_t> bytes = EverythingBuilder().Build();
  GgufFile a = MustParse(bytes);
  GgufFile b = std::move(a);
  EXPECT_EQ(*b.GetString("t.str"), "h\xc3\xa9llo");
  EXPECT_EQ(b.GetArray("t.arr.nested").value()->at(0).AsArray()->at(0).AsString(), "x");
  EXPECT_EQ(b.FindTensor("t.f16.3d")->n_elements, 24);
}

TEST(GgufFile, OpensFromDisk) {
  std::vector<uint8_t> bytes = EverythingBuilder().Build();
  std::string path = (std::filesystem::temp_directory_path() /
                      ("kvmem_gguf_test_" + std::to_string(::getpid()) + ".gguf"))
                         .string();
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  Result<GgufFile> f = GgufFile::Open(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->tensors().size(), 5u);
  EXPECT_EQ(f->FindTensor("output.weight")->data[0], TensorByte(2, 0));

  Result<GgufFile> missing = GgufFile::Open(path);
  EXPECT_EQ(missing.status().code(), ErrorCode::kIo);
}

// ---- Typed keys and getter errors.

TEST(GgufKeys, TableIsConsistent) {
  std::set<std::string_view> seen;
  for (int i = 0; i < kNumKeys; ++i) {
    auto key = static_cast<Key>(i);
    std::string_view p = KeyPattern(key);
    EXPECT_TRUE(seen.insert(p).second) << "duplicate " << p;
    EXPECT_EQ(KeyIsArchPrefixed(key), p.starts_with("{arch}.")) << p;
    EXPECT_TRUE(p.starts_with("{arch}.") || p.starts_with("general.") ||
                p.starts_with("tokenizer."))
        << p;
  }
  EXPECT_EQ(KeyName(Key::kBlockCount, "llama"), "llama.block_count");
  EXPECT_EQ(KeyName(Key::kHeadCountKv, "gemma3"), "gemma3.attention.head_count_kv");
  EXPECT_EQ(KeyName(Key::kSlidingWindow, "gemma3"), "gemma3.attention.sliding_window");
  EXPECT_EQ(KeyName(Key::kContextLength, ""), "{arch}.context_length");
  EXPECT_EQ(KeyName(Key::kTokenizerEotId, "llama"), "tokenizer.ggml.eot_token_id");
  EXPECT_EQ(KeyName(Key::kTokenizerChatTemplate, "x"), "tokenizer.chat_template");
  EXPECT_EQ(KeyName(Key::kGeneralAlignment, "x"), "general.alignment");
}

TEST(GgufKeys, TypedGettersUseArchitecture) {
  std::vector<uint8_t> bytes = EverythingBuilder().Build();
  GgufFile f = MustParse(bytes);
  EXPECT_EQ(*f.GetString(Key::kGeneralArchitecture), "llama");
  EXPECT_EQ(*f.GetString(Key::kGeneralName), "tiny");
  EXPECT_EQ(*f.GetUint(Key::kBlockCount), 2u);
  EXPECT_EQ(*f.GetUint(Key::kBlockCount, "llama"), 2u);
  EXPECT_EQ(*f.GetFloat(Key::kRopeFreqBase), 10000.0f);
  EXPECT_TRUE(f.Has(Key::kBlockCount));
  EXPECT_FALSE(f.Has(Key::kBlockCount, "qwen3"));
  EXPECT_EQ(f.Name(Key::kBlockCount, "qwen3"), "qwen3.block_count");

  Result<uint64_t> missing = f.GetUint(Key::kContextLength);
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'llama.context_length'"), std::string::npos)
      << missing.status().message();
  EXPECT_EQ(f.GetUint(Key::kBlockCount, "qwen3").status().code(), ErrorCode::kNotFound);
}

TEST(GgufKeys, OptionalGetters) {
  std::vector<uint8_t> bytes = EverythingBuilder().Build();
  GgufFile f = MustParse(bytes);
  EXPECT_EQ(*f.GetUintOr(Key::kContextLength, 2048), 2048u);
  EXPECT_EQ(*f.GetUintOr(Key::kBlockCount, 7), 2u);
  EXPECT_EQ(*f.GetIntOr("nope", -3), -3);
  EXPECT_EQ(*f.GetFloatOr(Key::kLayerNormRmsEps, 1e-5f), 1e-5f);
  EXPECT_EQ(*f.GetBoolOr(Key::kTokenizerAddBos, true), true);
  EXPECT_EQ(*f.GetStringOr(Key::kTokenizerPre, "default"), "default");
  EXPECT_EQ(*f.GetStringOr("t.str", "x"), "h\xc3\xa9llo");
  // Present with the wrong type is an error, not the fallback.
  EXPECT_EQ(f.GetUintOr("t.str", 1).status().code(), ErrorCode::kCorrupt);
  EXPECT_EQ(f.GetBoolOr("t.u8", false).status().code(), ErrorCode::kCorrupt);
}

struct GetterErrorCase {
  const char* name;
  std::function<Status(const GgufFile&)> call;
  ErrorCode code;
  std::vector<std::string> substrings;
};

class GetterErrorTest : public ::testing::TestWithParam<GetterErrorCase> {};

TEST_P(GetterErrorTest, NamesKeyAndTypes) {
  std::vector<uint8_t> bytes = EverythingBuilder().Build();
  GgufFile f = MustParse(bytes);
  Status s = GetParam().call(f);
  EXPECT_EQ(s.code(), GetParam().code) << s.ToString();
  for (const std::string& sub : GetParam().substrings) {
    EXPECT_NE(s.message().find(sub), std::string::npos)
        << "'" << sub << "' not in: " << s.message();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Getters, GetterErrorTest,
    ::testing::Values(
        GetterErrorCase{"Missing",
                        [](const GgufFile& f) { return f.GetUint("no.such").status(); },
                        ErrorCode::kNotFound,
                        {"'no.such'"}},
        GetterErrorCase{"UintFromString",
                        [](const GgufFile& f) { return f.GetUint("t.str").status(); },
                        ErrorCode::kCorrupt,
                        {"'t.str'", "type string", "unsigned integer"}},
        GetterErrorCase{"UintFromNegative",
                        [](const GgufFile& f) { return f.GetUint("t.i8").status(); },
                        ErrorCode::kOutOfRange,
                        {"'t.i8'", "-100"}},
        GetterErrorCase{"IntFromHugeUint",
                        [](const GgufFile& f) { return f.GetInt("t.u64max").status(); },
                        ErrorCode::kOutOfRange,
                        {"'t.u64max'", "int64"}},
        GetterErrorCase{"IntFromFloat",
                        [](const GgufFile& f) { return f.GetInt("t.f32").status(); },
                        ErrorCode::kCorrupt,
                        {"'t.f32'", "type float32", "an integer"}},
        GetterErrorCase{"FloatFromInt",
                        [](const GgufFile& f) { return f.GetFloat("t.u8").status(); },
                        ErrorCode::kCorrupt,
                        {"'t.u8'", "type uint8", "float32"}},
        GetterErrorCase{"BoolFromUint8",
                        [](const GgufFile& f) { return f.GetBool("t.u8").status(); },
                        ErrorCode::kCorrupt,
                        {"'t.u8'", "type uint8", "expected bool"}},
        GetterErrorCase{"StringFromArray",
                        [](const GgufFile& f) { return f.GetString("t.arr.str").status(); },
                        ErrorCode::kCorrupt,
                        {"'t.arr.str'", "array of string", "expected string"}},
        GetterErrorCase{"ArrayFromScalar",
                        [](const GgufFile& f) { return f.GetArray("t.u8").status(); },
                        ErrorCode::kCorrupt,
                        {"'t.u8'", "type uint8", "expected array"}},
        GetterErrorCase{"StringArrayFromInts",
                        [](const GgufFile& f) { return f.GetStringArray("t.arr.i32").status(); },
                        ErrorCode::kCorrupt,
                        {"'t.arr.i32'", "array of int32", "array of string"}},
        GetterErrorCase{"FloatArrayFromStrings",
                        [](const GgufFile& f) { return f.GetFloatArray("t.arr.str").status(); },
                        ErrorCode::kCorrupt,
                        {"'t.arr.str'", "array of string", "float32"}},
        GetterErrorCase{"Int32ArrayOverflow",
                        [](const GgufFile& f) { return f.GetInt32Array("t.arr.u64").status(); },
                        ErrorCode::kOutOfRange,
                        {"'t.arr.u64'", "element 1", "int32"}},
        GetterErrorCase{"Int32ArrayFromNested",
                        [](const GgufFile& f) { return f.GetInt32Array("t.arr.nested").status(); },
                        ErrorCode::kCorrupt,
                        {"'t.arr.nested'", "array of array of string"}}),
    [](const ::testing::TestParamInfo<GetterErrorCase>& info) { return info.param.name; });

// ---- The real model (scripts/setup.sh fetches it); skipped when absent.

TEST(GgufRealModel, SmolLM2) {
  const char* home = std::getenv("HOME");
  std::filesystem::path path = std::filesystem::path(home ? home : "") /
                               ".cache/kvmem/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  Result<GgufFile> r = GgufFile::Open(path.string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const GgufFile& f = *r;
  EXPECT_EQ(f.architecture(), "llama");
  EXPECT_EQ(f.tensors().size(), 272u);
  EXPECT_EQ(*f.GetUint(Key::kBlockCount), 30u);
  EXPECT_EQ(*f.GetUint(Key::kEmbeddingLength), 576u);
  EXPECT_EQ(f.GetStringArray(Key::kTokenizerTokens)->size(), 49152u);
  const TensorInfo* emb = f.FindTensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, DType::kQ8_0);
  EXPECT_EQ(emb->n_dims, 2);
  EXPECT_EQ(emb->dims[0], 576);
  EXPECT_EQ(emb->dims[1], 49152);
  EXPECT_EQ(emb->n_bytes, 576u / 32 * 34 * 49152);
  for (const TensorInfo& t : f.tensors()) {
    EXPECT_GE(t.data, f.bytes().data() + f.data_offset()) << t.name;
    EXPECT_LE(t.data + t.n_bytes, f.bytes().data() + f.bytes().size()) << t.name;
  }
}

}  // namespace
}  // namespace kvmem::gguf
