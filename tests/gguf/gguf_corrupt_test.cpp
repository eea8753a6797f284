// Malformed GGUF files: one hand-made bad file per rule the reader enforces, each checked for the
// error code and for a message naming the bad field; plus every truncation and byte corruption
// of a valid file (must fail or parse, never crash; run under ASan/UBSan in CI).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf_test_writer.h"

namespace kvmem::gguf {
namespace {

using testing::ByteWriter;
using testing::GgufBuilder;
using VT = ValueType;

constexpr uint32_t kF32 = static_cast<uint32_t>(DType::kF32);
constexpr uint32_t kQ8_0 = static_cast<uint32_t>(DType::kQ8_0);
constexpr uint32_t kArrayId = static_cast<uint32_t>(VT::kArray);

// Valid: an architecture, one key, one F32 tensor "w" of 32x2 (256 bytes at data offset 0).
GgufBuilder Valid() {
  GgufBuilder b;
  b.String("general.architecture", "llama").Scalar("llama.block_count", VT::kUint32, 1u);
  return b;
}
GgufBuilder ValidWithTensor() { return Valid().Tensor("w", {32, 2}, kF32); }

// One key `k` whose value bytes are written by `body`, then tensor "w".
std::vector<uint8_t> WithKv(uint32_t type, GgufBuilder::Body body) {
  return Valid().Kv("k", type, std::move(body)).Tensor("w", {32, 2}, kF32).Build();
}
std::vector<uint8_t> WithTensor(std::string name, std::vector<int64_t> dims, uint32_t type,
                                std::optional<uint64_t> offset = std::nullopt) {
  return Valid().Tensor(std::move(name), std::move(dims), type, offset).Build();
}

struct BadCase {
  const char* name;
  std::function<std::vector<uint8_t>()> make;
  ErrorCode code;
  std::vector<std::string> substrings;  // all must appear in the message
};

const BadCase kBadCases[] = {
    // Header.
    {"EmptyFile", [] { return std::vector<uint8_t>{}; }, ErrorCode::kCorrupt, {"magic"}},
    {"BadMagic",
     [] { return ValidWithTensor().Magic(0x46554746).Build(); },
     ErrorCode::kCorrupt,
     {"bad magic 'FGUF'"}},
    {"Version1",
     [] { return ValidWithTensor().Version(1).Build(); },
     ErrorCode::kUnsupported,
     {"version 1", "only 2 and 3"}},
    {"Version4",
     [] { return ValidWithTensor().Version(4).Build(); },
     ErrorCode::kUnsupported,
     {"version 4"}},
    {"BigEndian",
     [] { return ValidWithTensor().Version(0x03000000).Build(); },
     ErrorCode::kUnsupported,
     {"big-endian"}},
    {"HeaderTruncated",
     [] {
       ByteWriter w;
       w.U32(kGgufMagic).U32(3).U32(0);
       return w.bytes();
     },
     ErrorCode::kCorrupt,
     {"tensor count", "truncated"}},
    {"HugeKvCount",
     [] { return ValidWithTensor().KvCount(uint64_t{1} << 60).Build(); },
     ErrorCode::kCorrupt,
     {"metadata count 1152921504606846976"}},
    {"HugeTensorCount",
     [] { return ValidWithTensor().TensorCount(uint64_t{1} << 60).Build(); },
     ErrorCode::kCorrupt,
     {"tensor count 1152921504606846976"}},
    // Metadata.
    {"KeyLengthPastEnd",
     [] {
       ByteWriter w;
       w.U32(kGgufMagic).U32(3).U64(0).U64(1).U64(1000).Zeros(16);
       return w.bytes();
     },
     ErrorCode::kCorrupt,
     {"metadata key #0", "key length 1000", "past end of file"}},
    {"EmptyKey",
     [] { return Valid().Scalar("", VT::kUint8, uint8_t{1}).Build(); },
     ErrorCode::kCorrupt,
     {"metadata key #2 is empty"}},
    {"DuplicateKey",
     [] { return Valid().Scalar("llama.block_count", VT::kUint32, 2u).Build(); },
     ErrorCode::kCorrupt,
     {"duplicate metadata key 'llama.block_count'"}},
    {"StringValuePastEnd",
     [] {
       return WithKv(static_cast<uint32_t>(VT::kString),
                     [](ByteWriter& w) { w.U64(uint64_t{1} << 40); });
     },
     ErrorCode::kCorrupt,
     {"metadata 'k'", "string length 1099511627776", "past end of file"}},
    {"UnknownValueType",
     [] { return WithKv(13, [](ByteWriter& w) { w.U32(0); }); },
     ErrorCode::kCorrupt,
     {"metadata 'k'", "unknown value type 13"}},
    {"BoolValueTwo",
     [] { return Valid().Scalar("k", VT::kBool, uint8_t{2}).Build(); },
     ErrorCode::kCorrupt,
     {"metadata 'k'", "bool", "is 2"}},
    {"ScalarPastEnd",
     [] {
       ByteWriter w;
       w.U32(kGgufMagic).U32(3).U64(0).U64(1).Str("k").Type(VT::kUint64).Zeros(1);
       return w.bytes();
     },
     ErrorCode::kCorrupt,
     {"metadata 'k'", "uint64", "truncated"}},
    {"ArrayCountHuge",
     [] {
       return WithKv(kArrayId, [](ByteWriter& w) { w.Type(VT::kUint32).U64(uint64_t{1} << 62); });
     },
     ErrorCode::kCorrupt,
     {"metadata 'k'", "array count 4611686018427387904 of uint32"}},
    {"ArrayCountPastEnd",
     [] { return WithKv(kArrayId, [](ByteWriter& w) { w.Type(VT::kUint32).U64(1000); }); },
     ErrorCode::kCorrupt,
     {"metadata 'k'", "array count 1000"}},
    {"StringArrayCountPastEnd",
     [] { return WithKv(kArrayId, [](ByteWriter& w) { w.Type(VT::kString).U64(1 << 20); }); },
     ErrorCode::kCorrupt,
     {"metadata 'k'", "array count 1048576 of string"}},
    {"StringArrayElementPastEnd",
     [] {
       return WithKv(kArrayId, [](ByteWriter& w) {
         w.Type(VT::kString).U64(2).Str("a").U64(uint64_t{1} << 40);
       });
     },
     ErrorCode::kCorrupt,
     {"metadata 'k'", "element 1", "string length 1099511627776"}},
    {"UnknownArrayElementType",
     [] { return WithKv(kArrayId, [](ByteWriter& w) { w.U32(99).U64(1); }); },
     ErrorCode::kCorrupt,
     {"metadata 'k'", "unknown array element type 99"}},
    {"BoolArrayElementTwo",
     [] {
       return Valid().ScalarArray<uint8_t>("k", VT::kBool, {1, 0, 7}).Build();
     },
     ErrorCode::kCorrupt,
     {"metadata 'k'", "bool element 2 is 7"}},
    {"ArraysNestedTooDeep",
     [] {
       return WithKv(kArrayId, [](ByteWriter& w) {
         for (int i = 1; i < kMaxArrayDepth; ++i) w.Type(VT::kArray).U64(1);
         w.Type(VT::kArray).U64(1).Type(VT::kUint8).U64(0);
       });
     },
     ErrorCode::kCorrupt,
     {"metadata 'k'", "nested deeper than 4"}},
    {"AlignmentZero",
     [] { return Valid().Scalar("general.alignment", VT::kUint32, 0u).Build(); },
     ErrorCode::kCorrupt,
     {"general.alignment 0 is not a nonzero power of two"}},
    {"AlignmentThree",
     [] { return Valid().Scalar("general.alignment", VT::kUint32, 3u).Build(); },
     ErrorCode::kCorrupt,
     {"general.alignment 3 is not a nonzero power of two"}},
    {"AlignmentNegative",
     [] { return Valid().Scalar("general.alignment", VT::kInt32, -32).Build(); },
     ErrorCode::kCorrupt,
     {"general.alignment -32"}},
    {"AlignmentString",
     [] { return Valid().String("general.alignment", "32").Build(); },
     ErrorCode::kCorrupt,
     {"general.alignment has type string"}},
    {"ArchitectureNotString",
     [] {
       GgufBuilder b;
       return b.Scalar("general.architecture", VT::kUint32, 1u).Build();
     },
     ErrorCode::kCorrupt,
     {"general.architecture has type uint32", "expected string"}},
    // Tensor table.
    {"TensorNamePastEnd",
     [] {
       ByteWriter w;
       w.U32(kGgufMagic).U32(3).U64(1).U64(0).U64(uint64_t{1} << 40).Zeros(32);
       return w.bytes();
     },
     ErrorCode::kCorrupt,
     {"tensor #0", "name length 1099511627776", "past end of file"}},
    {"NDimsZero",
     [] { return WithTensor("w", {}, kF32); },
     ErrorCode::kCorrupt,
     {"tensor 'w': n_dims 0 is out of range"}},
    {"NDimsFive",
     [] {
       return WithTensor("w", {32, 1, 1, 1, 1}, kF32);
     },
     ErrorCode::kCorrupt,
     {"tensor 'w': n_dims 5 is out of range"}},
    {"DimensionZero",
     [] {
       return WithTensor("w", {32, 4, 0}, kF32);
     },
     ErrorCode::kCorrupt,
     {"tensor 'w': dimension 2 is zero"}},
    {"DimensionNegative",
     [] {
       return WithTensor("w", {32, -1}, kF32);
     },
     ErrorCode::kCorrupt,
     {"tensor 'w': dimension 1 is negative"}},
    {"ElementCountOverflow",
     [] {
       return WithTensor("w", {int64_t{1} << 32, int64_t{1} << 31}, kF32);
     },
     ErrorCode::kCorrupt,
     {"tensor 'w': element count overflows"}},
    {"ByteSizeOverflow",
     [] { return WithTensor("w", {int64_t{1} << 62}, kF32); },
     ErrorCode::kCorrupt,
     {"tensor 'w': byte size overflows"}},
    {"UnknownTensorType",
     [] { return WithTensor("w", {32}, 99); },
     ErrorCode::kUnsupported,
     {"tensor 'w': unknown tensor type id 99"}},
    {"RemovedTypeQ4_2",
     [] { return WithTensor("w", {32}, 4); },
     ErrorCode::kUnsupported,
     {"tensor 'w': unknown tensor type id 4", "Q4_2"}},
    {"RemovedTypeQ4_3",
     [] { return WithTensor("w", {32}, 5); },
     ErrorCode::kUnsupported,
     {"tensor 'w': unknown tensor type id 5"}},
    {"RowNotMultipleOfBlock",
     [] {
       return WithTensor("w", {33, 2}, kQ8_0);
     },
     ErrorCode::kCorrupt,
     {"tensor 'w': row length (dimension 0) 33 is not a multiple of the Q8_0 block size 32"}},
    {"OffsetUnaligned",
     [] { return WithTensor("w", {32}, kF32, 4); },
     ErrorCode::kCorrupt,
     {"tensor 'w': data offset 4 is not a multiple of the alignment 32"}},
    {"DataPastEnd",
     [] {
       std::vector<uint8_t> b = ValidWithTensor().Build();
       b.pop_back();
       return b;
     },
     ErrorCode::kCorrupt,
     {"tensor 'w': data at offset 0 (256 bytes) extends past end of file"}},
    {"OffsetWrapsAround",
     [] { return WithTensor("w", {32}, kF32, std::numeric_limits<uint64_t>::max() - 31); },
     ErrorCode::kCorrupt,
     {"tensor 'w': data at offset 18446744073709551584", "extends past end of file"}},
    {"OverlappingTensors",
     [] { return Valid().Tensor("a", {64}, kF32, 0).Tensor("b", {8}, kF32, 224).Build(); },
     ErrorCode::kCorrupt,
     {"tensor 'b'", "overlaps tensor 'a'"}},
    {"DuplicateTensorName",
     [] { return Valid().Tensor("w", {32}, kF32).Tensor("w", {32}, kF32).Build(); },
     ErrorCode::kCorrupt,
     {"duplicate tensor name 'w'"}},
    {"NamesAreEscaped",
     [] { return Valid().Tensor("w\x01", {32}, kF32).Tensor("w\x01", {32}, kF32).Build(); },
     ErrorCode::kCorrupt,
     {"duplicate tensor name 'w\\x01'"}},
};

class BadFileTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadFileTest, FailsNamingTheField) {
  const BadCase& c = GetParam();
  std::vector<uint8_t> bytes = c.make();
  Result<GgufFile> f = GgufFile::Parse(bytes);
  ASSERT_FALSE(f.ok()) << "parsed a bad file";
  EXPECT_EQ(f.status().code(), c.code) << f.status().ToString();
  for (const std::string& sub : c.substrings) {
    EXPECT_NE(f.status().message().find(sub), std::string::npos)
        << "'" << sub << "' not in: " << f.status().message();
  }
}

INSTANTIATE_TEST_SUITE_P(Gguf, BadFileTest, ::testing::ValuesIn(kBadCases),
                         [](const ::testing::TestParamInfo<BadCase>& info) {
                           return info.param.name;
                         });

// The bases the bad cases start from are themselves valid.
TEST(GgufCorrupt, BasesAreValid) {
  std::vector<uint8_t> a = ValidWithTensor().Build();
  EXPECT_TRUE(GgufFile::Parse(a).ok());
  std::vector<uint8_t> b =
      WithKv(static_cast<uint32_t>(VT::kUint8), [](ByteWriter& w) { w.Put(uint8_t{1}); });
  EXPECT_TRUE(GgufFile::Parse(b).ok());
  std::vector<uint8_t> nested = WithKv(kArrayId, [](ByteWriter& w) {  // exactly at the limit
    for (int i = 1; i < kMaxArrayDepth; ++i) w.Type(VT::kArray).U64(1);
    w.Type(VT::kUint8).U64(0);
  });
  EXPECT_TRUE(GgufFile::Parse(nested).ok()) << GgufFile::Parse(nested).status().ToString();
}

// A small file touching every value type, with nothing after its last tensor.
std::vector<uint8_t> SmallFile() {
  return Valid()
      .Scalar("a.u8", VT::kUint8, uint8_t{1})
      .Scalar("a.i16", VT::kInt16, int16_t{-2})
      .Scalar("a.f64", VT::kFloat64, 0.5)
      .Scalar("a.bool", VT::kBool, uint8_t{0})
      .String("a.s", "str")
      .StringArray("a.strs", {"x", "yz"})
      .ScalarArray<float>("a.f32s", VT::kFloat32, {1.0f})
      .Kv("a.nested", kArrayId,
          [](ByteWriter& w) { w.Type(VT::kArray).U64(1).Type(VT::kInt64).U64(1).I64(-1); })
      .Tensor("q", {32, 2}, kQ8_0)
      .Tensor("w", {3}, kF32)
      .Build();
}

TEST(GgufCorrupt, EveryTruncationFails) {
  std::vector<uint8_t> full = SmallFile();
  ASSERT_TRUE(GgufFile::Parse(full).ok());
  for (size_t n = 0; n < full.size(); ++n) {
    // An exactly-sized copy, so that ASan sees any read past the end.
    std::vector<uint8_t> prefix(full.begin(), full.begin() + static_cast<ptrdiff_t>(n));
    Result<GgufFile> f = GgufFile::Parse(prefix);
    EXPECT_FALSE(f.ok()) << "truncated to " << n << " of " << full.size() << " bytes";
    if (!f.ok()) {
      EXPECT_EQ(f.status().code(), ErrorCode::kCorrupt) << f.status().ToString();
    }
  }
}

// Overwriting any single byte with a few values either parses or fails cleanly.
TEST(GgufCorrupt, EveryByteCorruptionIsHandled) {
  const std::vector<uint8_t> full = SmallFile();
  for (size_t i = 0; i < full.size(); ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::vector<uint8_t> bytes = full;
      bytes[i] = v;
      Result<GgufFile> f = GgufFile::Parse(bytes);
      if (!f.ok()) continue;
      for (const TensorInfo& t : f->tensors()) {
        ASSERT_GE(t.data, bytes.data());
        ASSERT_LE(t.data + t.n_bytes, bytes.data() + bytes.size());
      }
    }
  }
}

}  // namespace
}  // namespace kvmem::gguf
