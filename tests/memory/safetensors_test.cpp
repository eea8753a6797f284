// safetensors writer and hostile-input parser: round trips, a file written by Hugging Face's
// Python `safetensors` (tests/data/memory/python_written.safetensors), our files opened by that
// package when the venv has it, and every framing violation rejected with a message naming it.
#include "memory/store/safetensors.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "test_util.h"

namespace kvmem::memory::store {
namespace {

using testing::TempDir;

std::span<const uint8_t> Bytes(const void* p, size_t n) {
  return {static_cast<const uint8_t*>(p), n};
}

// A file from a raw header string and data buffer.
std::vector<uint8_t> MakeFile(const std::string& header, const std::vector<uint8_t>& data) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(header.size() >> (8 * i));
  s += header;
  s.append(data.begin(), data.end());
  return {s.begin(), s.end()};
}

// Parses header + data and expects failure with `code` and `needle` in the message.
void ExpectBad(const std::string& header, size_t data_bytes, ErrorCode code,
               const std::string& needle) {
  const std::vector<uint8_t> file = MakeFile(header, std::vector<uint8_t>(data_bytes, 7));
  Result<SafetensorsView> r = ParseSafetensors(file);
  ASSERT_FALSE(r.ok()) << header;
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(needle), std::string::npos)
      << "message: " << r.status().message() << "\nexpected to contain: " << needle;
}

struct Sample {
  std::vector<uint16_t> f16 = {1, 2, 3, 4, 5, 6};
  std::vector<int64_t> pos = {-5, 0, int64_t{1} << 40};
  std::vector<uint8_t> raw = {9, 8, 7};
  SafetensorsWriter writer;
  Sample() {
    EXPECT_TRUE(writer.AddMetadata("model", "abc").ok());
    EXPECT_TRUE(writer.AddMetadata("text", "caf\xc3\xa9").ok());
    EXPECT_TRUE(writer.AddTensor("k", StDType::kF16, {2, 3}, Bytes(f16.data(), 12)).ok());
    EXPECT_TRUE(writer.AddTensor("positions", StDType::kI64, {3}, Bytes(pos.data(), 24)).ok());
    EXPECT_TRUE(writer.AddTensor("raw", StDType::kU8, {3}, Bytes(raw.data(), 3)).ok());
    EXPECT_TRUE(writer.AddTensor("none", StDType::kF32, {0, 4}, {}).ok());
  }
};

TEST(SafetensorsTest, RoundTrip) {
  Sample s;
  const std::vector<uint8_t> file = s.writer.ToBytes();
  uint64_t header_len = 0;
  std::memcpy(&header_len, file.data(), 8);
  EXPECT_EQ(header_len % 8, 0u) << "header padded so data starts 8-aligned";

  Result<SafetensorsView> v = ParseSafetensors(file);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->metadata.size(), 2u);
  EXPECT_EQ(*v->FindMetadata("text"), "caf\xc3\xa9");
  ASSERT_EQ(v->tensors.size(), 4u);
  const StTensor* k = v->Find("k");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->dtype, StDType::kF16);
  EXPECT_EQ(k->shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(k->data.size(), 12u);
  EXPECT_EQ(std::memcmp(k->data.data(), s.f16.data(), 12), 0);
  const StTensor* p = v->Find("positions");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(std::memcmp(p->data.data(), s.pos.data(), 24), 0);
  EXPECT_EQ(v->Find("none")->data.size(), 0u);
  EXPECT_EQ(v->Find("missing"), nullptr);

  // The pieces are the same bytes as ToBytes.
  const std::string header = s.writer.Header();
  std::vector<uint8_t> joined;
  for (auto piece : s.writer.Pieces(header))
    joined.insert(joined.end(), piece.begin(), piece.end());
  EXPECT_EQ(joined, file);
}

TEST(SafetensorsTest, WriterRejectsBadInput) {
  SafetensorsWriter w;
  uint8_t b[4] = {};
  EXPECT_EQ(w.AddTensor("t", StDType::kF16, {3}, Bytes(b, 4)).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(w.AddTensor("__metadata__", StDType::kU8, {4}, Bytes(b, 4)).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(w.AddTensor("t", StDType::kU8, {-4}, Bytes(b, 4)).code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(w.AddTensor("t", StDType::kU8, {4}, Bytes(b, 4)).ok());
  EXPECT_EQ(w.AddTensor("t", StDType::kU8, {4}, Bytes(b, 4)).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(w.AddMetadata("k", "\xff").code(), ErrorCode::kInvalidArgument);
}

TEST(SafetensorsTest, ReadsFileWrittenByPythonSafetensors) {
  const std::vector<uint8_t> file =
      testing::ReadAll(std::string(KVMEM_TESTDATA_DIR) + "/memory/python_written.safetensors");
  ASSERT_FALSE(file.empty());
  Result<SafetensorsView> v = ParseSafetensors(file);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v->FindMetadata("format"), "np");
  EXPECT_EQ(*v->FindMetadata("note"), "caf\xc3\xa9 \xe2\x98\x83");
  ASSERT_EQ(v->tensors.size(), 6u);
  const StTensor* u8 = v->Find("u8");
  ASSERT_NE(u8, nullptr);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(u8->data[i], i);
  const StTensor* i64 = v->Find("i64");
  int64_t vals[3];
  std::memcpy(vals, i64->data.data(), 24);
  EXPECT_EQ(vals[0], -1);
  EXPECT_EQ(vals[1], int64_t{1} << 40);
  EXPECT_EQ(v->Find("f16")->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(v->Find("u16")->dtype, StDType::kU16);
  EXPECT_EQ(v->Find("empty")->shape, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(v->Find("flags")->dtype, StDType::kBool);
}

// Python's `safetensors` opens what we write (skipped where the venv lacks the package).
TEST(SafetensorsTest, PythonSafetensorsOpensOurFile) {
  const char* home = std::getenv("HOME");
  std::string py = std::string(home ? home : "") + "/.cache/kvmem/venv/bin/python";
  if (!std::filesystem::exists(py)) py = "python3";
  if (std::system((py + " -c 'import safetensors, numpy' 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << py << " cannot import safetensors (pip install safetensors)";
  }
  TempDir dir;
  Sample s;
  testing::WriteAll(dir / "ours.safetensors", s.writer.ToBytes());
  const std::string script =
      "import sys\n"
      "from safetensors import safe_open\n"
      "with safe_open(sys.argv[1], 'np') as f:\n"
      "  m = f.metadata()\n"
      "  assert m == {'model': 'abc', 'text': 'caf\\u00e9'}, m\n"
      "  k = f.get_tensor('k'); assert k.dtype.name == 'float16' and k.shape == (2, 3)\n"
      "  assert list(k.view('uint16').ravel()) == [1, 2, 3, 4, 5, 6]\n"
      "  p = f.get_tensor('positions'); assert list(p) == [-5, 0, 1 << 40], p\n"
      "  assert list(f.get_tensor('raw')) == [9, 8, 7]\n"
      "  assert f.get_tensor('none').shape == (0, 4)\n"
      "print('ok')\n";
  testing::WriteAll(dir / "check.py", std::vector<uint8_t>(script.begin(), script.end()));
  EXPECT_EQ(std::system((py + " " + (dir / "check.py") + " " + (dir / "ours.safetensors")).c_str()),
            0);
}

TEST(SafetensorsTest, RejectsBadFraming) {
  {
    std::vector<uint8_t> tiny = {1, 2, 3};
    Result<SafetensorsView> r = ParseSafetensors(tiny);
    EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
    EXPECT_NE(r.status().message().find("shorter than the 8-byte header length"),
              std::string::npos);
  }
  {
    std::vector<uint8_t> huge(16, 0);
    huge[7] = 0x7f;  // header length ~ 2^63
    Result<SafetensorsView> r = ParseSafetensors(huge);
    EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
    EXPECT_NE(r.status().message().find("exceeds the limit"), std::string::npos);
    r = ParseSafetensors(MakeFile(std::string(64, ' '), {}), /*max_header_bytes=*/32);
    EXPECT_NE(r.status().message().find("exceeds the limit of 32"), std::string::npos);
  }
  {
    std::vector<uint8_t> f = MakeFile("{}", {});
    f[0] = 200;  // longer than the file
    Result<SafetensorsView> r = ParseSafetensors(f);
    EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
    EXPECT_NE(r.status().message().find("runs past the end"), std::string::npos);
  }
  ExpectBad("", 0, ErrorCode::kCorrupt, "does not start with '{'");
  ExpectBad("[1]", 0, ErrorCode::kCorrupt, "does not start with '{'");
  ExpectBad("{\"a\":", 0, ErrorCode::kCorrupt, "not valid JSON");
  ExpectBad("{\"a\":\"\xff\"}", 0, ErrorCode::kCorrupt, "not valid JSON");
  ExpectBad(std::string(20, '{'), 0, ErrorCode::kCorrupt, "nests deeper");
  ExpectBad(R"({"__metadata__":[]})", 0, ErrorCode::kCorrupt,
            "'__metadata__' is not a JSON object");
  ExpectBad(R"({"__metadata__":{"a":1}})", 0, ErrorCode::kCorrupt, "value of 'a' is not a string");
  ExpectBad(R"({"t":5})", 0, ErrorCode::kCorrupt, "tensor 't': entry is not a JSON object");
  ExpectBad(R"({"t":{"dtype":"X9","shape":[1],"data_offsets":[0,1]}})", 1, ErrorCode::kUnsupported,
            "unknown safetensors dtype 'X9'");
  ExpectBad(R"({"t":{"dtype":7,"shape":[1],"data_offsets":[0,1]}})", 1, ErrorCode::kCorrupt,
            "'dtype' missing or not a string");
  ExpectBad(R"({"t":{"shape":[1],"data_offsets":[0,1]}})", 1, ErrorCode::kCorrupt, "'dtype'");
  ExpectBad(R"({"t":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", 1, ErrorCode::kCorrupt,
            "'shape' entry '-1' is not a non-negative integer");
  ExpectBad(R"({"t":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", 1, ErrorCode::kCorrupt,
            "'shape' entry");
  ExpectBad(R"({"t":{"dtype":"U8","shape":1,"data_offsets":[0,1]}})", 1, ErrorCode::kCorrupt,
            "'shape' missing or not an array");
  ExpectBad(R"({"t":{"dtype":"U8","shape":[4611686018427387904,4611686018427387904],)"
            R"("data_offsets":[0,1]}})",
            1, ErrorCode::kCorrupt, "'shape' element count overflows");
  ExpectBad(R"({"t":{"dtype":"I64","shape":[4611686018427387904],"data_offsets":[0,1]}})", 1,
            ErrorCode::kCorrupt, "'shape' byte size overflows");
  ExpectBad(R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[0,1]}})", 1, ErrorCode::kCorrupt,
            "span 1 bytes != 'shape' x 'dtype' size 2");
  ExpectBad(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[1,0]}})", 1, ErrorCode::kCorrupt,
            "'data_offsets' begin 1 > end 0");
  ExpectBad(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", 1, ErrorCode::kCorrupt,
            "'data_offsets' must be two non-negative integers");
  ExpectBad(R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 2, ErrorCode::kCorrupt,
            "'data_offsets' end 4 past the data buffer (2 bytes");
  ExpectBad(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}})", 1,
            ErrorCode::kCorrupt, "unknown field 'x'");
  ExpectBad(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
            R"("b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})",
            3, ErrorCode::kCorrupt,
            "tensor 'b' 'data_offsets' begin 1 overlaps the previous tensor");
  ExpectBad(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
            R"("b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}})",
            3, ErrorCode::kCorrupt, "tensor 'b' 'data_offsets' begin 2 leaves a gap");
  ExpectBad(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", 2, ErrorCode::kCorrupt,
            "begin 1 leaves a gap (expected 0)");
  ExpectBad(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 3, ErrorCode::kCorrupt,
            "tensors cover 1 bytes of a 3-byte data buffer");
}

// Every truncation fails cleanly; every single-bit flip parses or fails, never crashes (the
// sanitizer build checks the "never reads out of bounds" half).
TEST(SafetensorsTest, TruncationsAndBitFlips) {
  Sample s;
  const std::vector<uint8_t> file = s.writer.ToBytes();
  for (size_t n = 0; n < file.size(); ++n) {
    Result<SafetensorsView> r = ParseSafetensors(std::span<const uint8_t>(file.data(), n));
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt) << n << ": " << r.status().ToString();
  }
  for (size_t i = 0; i < file.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> f = file;
      f[i] ^= static_cast<uint8_t>(1 << bit);
      Result<SafetensorsView> r = ParseSafetensors(f);
      if (r.ok()) {
        for (const StTensor& t : r->tensors) {
          ASSERT_GE(t.data.data(), f.data());
          ASSERT_LE(t.data.data() + t.data.size(), f.data() + f.size());
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvmem::memory::store
