// Model fingerprints: stable for equal bytes, different for a single changed byte, hex of the
// expected length; a missing file is an I/O error naming the path.
#include "memory/store/fingerprint.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "memory/store/hash.h"
#include "test_util.h"

namespace kvmem::memory::store {
namespace {

// The reference value of XXH3-128 of no bytes (xxhsum -H2), in canonical big-endian hex.
TEST(FingerprintTest, CanonicalHex) {
  EXPECT_EQ(Xxh128Hex(std::string_view()), "99aa06d3014798d86001c324468d497f");
  Xxh128Stream s;
  s.Update({});
  EXPECT_EQ(s.HexDigest(), "99aa06d3014798d86001c324468d497f");
}

TEST(FingerprintTest, WholeFileHash) {
  testing::TempDir dir;
  // Larger than one 4 MiB read chunk, so the streaming path is exercised.
  std::vector<uint8_t> bytes((9 << 20) + 123);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
  testing::WriteAll(dir / "a.gguf", bytes);
  Result<std::string> a = ModelFingerprint(dir / "a.gguf");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(IsXxh128Hex(*a));
  EXPECT_EQ(*a, Xxh128Hex(bytes));

  bytes[bytes.size() - 1] ^= 1;  // a weight byte near the end
  testing::WriteAll(dir / "b.gguf", bytes);
  EXPECT_NE(*ModelFingerprint(dir / "b.gguf"), *a);

  Result<std::string> missing = ModelFingerprint(dir / "missing.gguf");
  EXPECT_EQ(missing.status().code(), ErrorCode::kIo);
  EXPECT_NE(missing.status().message().find("missing.gguf"), std::string::npos);
}

}  // namespace
}  // namespace kvmem::memory::store
